// Package arch is the single source of nvg's model architecture: the Qwen3.5 text config
// (HF transformers `qwen3_5`, config.json field names) and, per decoder layer, the
// checkpoint tensors with their shapes, roles and how the student stores them.
//
// Every other package asks arch for tensor names and shapes instead of formatting
// "model.layers.N...." itself. DESIGN.md §3 gives the math each size enters.
package arch
