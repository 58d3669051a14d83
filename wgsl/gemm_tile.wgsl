// The shared body of the tiled GEMM kernels (linear.wgsl, blr_forward.wgsl): C[M, N] =
// A[M, K]·B block by block. Not a kernel: a library of templates that wgsl.Render parses
// with every shader. A kernel file declares its bindings, constants and helpers (Fast: rowA;
// general: loadA, loadB, store4), then `{{template "gemm_main" .}}` (or gemm_main_f32, which
// brings rowA, loadA and store4 of f32 A and C), and defines the hooks
// that differ by operand type, each on one line:
//   gemm_breg      the type of B's staging registers;
//   gemm_btrans    (dict t, P) statements turning block t's registers rb{t}_0..3 into values
//                  the next hook reads;
//   gemm_bcol      (dict j, P) the vec4<f32> of column j (k = 4·k4 + j) of those 4 rows;
//   gemm_bslot     (dict t, P) the vec4<f32> of slot t's register rb{t} (B not TransB);
//   gemm_bk        (P) a statement giving block s's K offset (k = kl + 4·(s / (BN/4))) to
//                  gemm_bload, in whatever form that one reads it;
//   gemm_bload     (dict i, P) the load of row `row + i`, k..k+3, into rb{t}_{i} (TransB);
//   gemm_bslotload (P) the load of slot s into rb{t} (B not TransB);
//   gemm_cfast     (dict i, q, P) the store of acc_{i}_{q} at row gm, column group
//                  (n0 >> 2) + lid.x + 16·q (Fast).
// Tiling: a workgroup of 16×16 threads computes a BM×BN block of C, each thread a TM×TN
// sub-block (TM = BM/16, TN = BN/16) in vec4 accumulators with literal indices: rows
// 4·(lid.y + 16·(i/4)) + i%4, column groups lid.x + 16·q (conflict-free reads of the tile,
// contiguous stores), stepping through K in BK slices staged in workgroup memory ta, tb.
{{- /* gemm_params: the uniform Params { m, n, k } (C is m×n, the inner dimension k) of the GEMM
kernels and their naive twins at binding B, read as p. */ -}}
{{define "gemm_params"}}
struct Params {
    m: u32,
    n: u32,
    k: u32,
};
@group(0) @binding({{.B}}) var<uniform> p: Params;
{{- end}}

{{- /* gemm_blr_io: the bindings of the BLR GEMM (blr_forward.wgsl, its lanes form and its
naive twin): a (element type A), bits (u32), sa (SA), then sc (ScaleC), c and raw (Raw) of
element type F, then gemm_params. Keys: A, SA, F, ScaleC, Raw. */ -}}
{{define "gemm_blr_io"}}
@group(0) @binding(0) var<storage, read> a: array<{{.A}}>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> sa: array<{{.SA}}>;
{{- if .ScaleC}}
@group(0) @binding(3) var<storage, read> sc: array<{{.F}}>;
@group(0) @binding(4) var<storage, read_write> c: array<{{.F}}>;
{{- if .Raw}}
@group(0) @binding(5) var<storage, read_write> raw: array<{{.F}}>;
{{- end}}
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<{{.F}}>;
{{- end}}

{{if .ScaleC}}{{if .Raw}}{{template "gemm_params" (dict "B" 6)}}{{else}}{{template "gemm_params" (dict "B" 5)}}{{end}}{{else}}{{template "gemm_params" (dict "B" 4)}}{{end}}
{{- end}}

{{- /* gemm_belem: e, the element index of B(kk, nn) in B's storage: [N, K] when TransB, else
[K, N]. Keys: TransB. */ -}}
{{define "gemm_belem"}}
{{- if .TransB}}
    let e = nn * p.k + kk;
{{- else}}
    let e = kk * p.n + nn;
{{- end}}
{{- end}}
{{- /* gemm_bvalue: gemm_belem, then the return of B(kk, nn) as f32 from the storage array b
(f32, or f16 packed two per u32 word when BF16: element e in half e & 1 of word e >> 1).
Keys: TransB, BF16. */ -}}
{{define "gemm_bvalue"}}
{{- template "gemm_belem" (dict "TransB" .TransB)}}
{{- if .BF16}}
    let pair = unpack2x16float(b[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
{{- else}}
    return b[e];
{{- end}}
{{- end}}

{{- /* gemm_loada: the general path's loadA(mm, kk) of an f32 A [m, k] in the storage array a,
0 outside it (linear.wgsl, linear_quant.wgsl). */ -}}
{{define "gemm_loada"}}fn loadA(mm: u32, kk: u32) -> f32 {
    if (mm >= p.m || kk >= p.k) {
        return 0.0;
    }
    return a[mm * p.k + kk];
}
{{- end}}
{{- /* gemm_store4: the general path's store4(row, n, v) of 4 consecutive outputs n..n+3 of C
(row = the row's offset gm·p.n) into the f32 storage array c, dropping columns past p.n
(linear.wgsl, linear_quant.wgsl). */ -}}
{{define "gemm_store4"}}fn store4(row: u32, n: u32, v: vec4<f32>) {
    if (n + 3u < p.n) {
        c[row + n] = v.x;
        c[row + n + 1u] = v.y;
        c[row + n + 2u] = v.z;
        c[row + n + 3u] = v.w;
    } else {
        for (var j = 0u; j < 4u; j++) {
            if (n + j < p.n) {
                c[row + n + j] = v[j];
            }
        }
    }
}
{{- end}}

{{- /* gemm_main_f32: gemm_main for an f32 A [m, k] in the storage array a and an f32 C in
c (linear.wgsl, linear_quant.wgsl), with its A readers (Fast: rowA; general: gemm_loada) and
the general path's gemm_store4. Takes the kernel's parameters. */ -}}
{{define "gemm_main_f32"}}
{{- if .Fast}}

// rowA returns 4 consecutive elements k..k+3 (k a multiple of 4) of row i of A.
fn rowA(i: u32, k: u32) -> vec4<f32> {
    return a[i * K4 + (k >> 2u)];
}
{{- else}}

{{template "gemm_loada"}}
{{- end}}

{{template "gemm_main" .}}
{{- if not .Fast}}

{{template "gemm_store4"}}
{{- end}}
{{- end}}

{{- /* gemm_tiles: the tile constants BM, BN, BK, the workgroup tiles ta [BK][BM/4] and
tb [BK][BN/4] of vec4<f32>, and on the fast path the compiled-in sizes N, K, N4 = N/4,
K4 = K/4. Takes the kernel's parameters (BM, BN, BK, Fast, N, K). */ -}}
{{define "gemm_tiles"}}
{{- $ASlots := mul .BK (div .BM 4)}}{{$BSlots := mul .BK (div .BN 4)}}
const BM = {{.BM}}u;
const BN = {{.BN}}u;
const BK = {{.BK}}u;

var<workgroup> ta: array<vec4<f32>, {{$ASlots}}>; // [BK][BM/4]: slot k·BM/4 + g holds m = 4g..4g+3
var<workgroup> tb: array<vec4<f32>, {{$BSlots}}>; // [BK][BN/4]: slot k·BN/4 + g holds n = 4g..4g+3
{{- if .Fast}}
const N = {{.N}}u;
const K = {{.K}}u;
const N4 = {{div .N 4}}u;
const K4 = {{div .K 4}}u;
{{- end}}
{{- end}}
{{define "gemm_main"}}
{{- $TM := div .BM 16}}{{$TN := div .BN 16}}{{$TM4 := div $TM 4}}{{$TN4 := div $TN 4}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}{{$BK4 := div .BK 4}}
{{- $ASlots := mul .BK $AM4}}{{$BSlots := mul .BK $BN4}}
{{- $ABlk := mul $AM4 $BK4}}{{$BBlk := mul $BN4 $BK4}}
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    // acc_i_q: row 4·(lid.y + 16·(i/4)) + i%4 of the block, columns 4·(lid.x + 16·q)..+3.
{{- range $i := seq $TM}}{{range $q := seq $TN4}}
    var acc_{{$i}}_{{$q}} = vec4<f32>(0.0);
{{- end}}{{end}}
{{- if .Fast}}
    let mlast = p.m - 1u;
    // Staging registers: A block t, row i: ra{t}_{i}; B when TransB (block t, row i):
    // rb{t}_{i}, else (slot t): rb{t}, of the kernel's B register type.
{{- range $t := seq (div (add $ABlk 255) 256)}}{{range $i := seq 4}}
    var ra{{$t}}_{{$i}}: vec4<f32>;
{{- end}}{{end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}{{range $i := seq 4}}
    var rb{{$t}}_{{$i}}: {{template "gemm_breg" $}};
{{- end}}{{end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
    var rb{{$t}}: {{template "gemm_breg" $}};
{{- end}}{{end}}
    {
        let kl = 0u;
{{- template "gemm_load" $}}
    }
    for (var k0 = 0u; k0 < K; k0 += BK) {
        // Store the staged registers: A blocks transposed (slot (4·k4 + j)·BM/4 + g holds
        // component j of rows 4g..4g+3).
{{- range $t := seq (div (add $ABlk 255) 256)}}
{{- template "gemm_slot" (dict "I" "        " "t" $t "Blk" $ABlk)}}
                let g = s % {{$AM4}}u;
                let k4 = s / {{$AM4}}u;
{{- range $j := seq 4}}{{$comp := index "xyzw" $j}}
                ta[(4u * k4 + {{$j}}u) * {{$AM4}}u + g] = vec4<f32>(ra{{$t}}_0.{{printf "%c" $comp}}, ra{{$t}}_1.{{printf "%c" $comp}}, ra{{$t}}_2.{{printf "%c" $comp}}, ra{{$t}}_3.{{printf "%c" $comp}});
{{- end}}
            }
        }
{{- end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}
{{- template "gemm_slot" (dict "I" "        " "t" $t "Blk" $BBlk)}}
                let g = s % {{$BN4}}u;
                let k4 = s / {{$BN4}}u;
                {{template "gemm_btrans" (dict "t" $t "P" $)}}
{{- range $j := seq 4}}
                tb[(4u * k4 + {{$j}}u) * {{$BN4}}u + g] = {{template "gemm_bcol" (dict "j" $j "P" $)}};
{{- end}}
            }
        }
{{- end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
        tb[li + {{mul $t 256}}u] = {{template "gemm_bslot" (dict "t" $t "P" $)}};
{{- end}}
{{- end}}
        workgroupBarrier();
        // The next slice's global loads are in flight during the products.
        if (k0 + BK < K) {
            let kl = k0 + BK;
{{- template "gemm_load" $}}
        }
{{- else}}
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // Staging: A (and B when TransB) are contiguous along k, so consecutive threads
        // take consecutive k and each slot loads 4 rows; B [K, N] is contiguous along n, so
        // a slot loads 4 consecutive n of one k.
{{- range $t := seq (div $ASlots 256)}}
        {
            let s = li + {{mul $t 256}}u;
            let sk = s % BK;
            let am = m0 + (s / BK) * 4u;
            ta[sk * {{$AM4}}u + s / BK] = vec4<f32>(loadA(am, k0 + sk), loadA(am + 1u, k0 + sk),
                                                    loadA(am + 2u, k0 + sk), loadA(am + 3u, k0 + sk));
        }
{{- end}}
{{- range $t := seq (div $BSlots 256)}}
        {
            let s = li + {{mul $t 256}}u;
{{- if $.TransB}}
            let sk = s % BK;
            let bn = n0 + (s / BK) * 4u;
            tb[sk * {{$BN4}}u + s / BK] = vec4<f32>(loadB(k0 + sk, bn), loadB(k0 + sk, bn + 1u),
                                                    loadB(k0 + sk, bn + 2u), loadB(k0 + sk, bn + 3u));
{{- else}}
            let sk = s / {{$BN4}}u;
            let g = s % {{$BN4}}u;
            let bn = n0 + g * 4u;
            tb[sk * {{$BN4}}u + g] = vec4<f32>(loadB(k0 + sk, bn), loadB(k0 + sk, bn + 1u),
                                               loadB(k0 + sk, bn + 2u), loadB(k0 + sk, bn + 3u));
{{- end}}
        }
{{- end}}
        workgroupBarrier();
{{- end}}
{{- range $kk := seq .BK}}
        {
{{- range $r := seq $TM4}}
            let a{{$r}} = ta[{{mul $kk $AM4}}u + lid.y + {{mul $r 16}}u];
{{- end}}
{{- range $q := seq $TN4}}
            let b{{$q}} = tb[{{mul $kk $BN4}}u + lid.x + {{mul $q 16}}u];
{{- end}}
{{- range $i := seq $TM}}{{$r := div $i 4}}{{$comp := index "xyzw" (mod $i 4)}}
{{- range $q := seq $TN4}}
            acc_{{$i}}_{{$q}} = fma(vec4<f32>(a{{$r}}.{{printf "%c" $comp}}), b{{$q}}, acc_{{$i}}_{{$q}});
{{- end}}{{end}}
        }
{{- end}}
        workgroupBarrier();
    }
{{- range $i := seq $TM}}
    {
        let gm = m0 + (lid.y + {{mul (div $i 4) 16}}u) * 4u + {{mod $i 4}}u;
        if (gm < p.m) {
{{- range $q := seq $TN4}}
{{- if $.Fast}}
            {{template "gemm_cfast" (dict "i" $i "q" $q "P" $)}}
{{- else}}
            store4(gm * p.n, n0 + (lid.x + {{mul $q 16}}u) * 4u, acc_{{$i}}_{{$q}});
{{- end}}
{{- end}}
        }
    }
{{- end}}
}
{{- end}}
{{- /* gemm_slot: opens the two blocks of register group t's slot s = li + 256·t of a
staging loop over Blk slots: the second is guarded by s < Blk where Blk < 256 (the last
group), else plain. The caller closes both. Keys: I (the indentation), t, Blk. */}}
{{- define "gemm_slot"}}
{{.I}}{
{{.I}}    let s = li + {{mul .t 256}}u;
{{- if lt .Blk 256}}
{{.I}}    if (s < {{.Blk}}u) {
{{- else}}
{{.I}}    {
{{- end}}
{{- end}}
{{- /* gemm_load: the staging loads of the K slice at kl (a u32 in scope, as are m0, n0,
mlast, li, s) into the registers: A 4×4 blocks through the kernel's rowA (rows 4g..4g+3
clamped to M, k = kl + 4·k4..+3) with g = s % (BM/4), k4 = s / (BM/4); B likewise when TransB
(gemm_bk, gemm_bload: row `row + i`, k..k+3), else slot s (gemm_bslotload: k = kl + s / (BN/4), 4
columns at n0 + 4·(s % (BN/4))). */}}
{{- define "gemm_load"}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}{{$BK4 := div .BK 4}}
{{- $ABlk := mul $AM4 $BK4}}{{$BBlk := mul $BN4 $BK4}}{{$BSlots := mul .BK $BN4}}
{{- range $t := seq (div (add $ABlk 255) 256)}}
{{- template "gemm_slot" (dict "I" "    " "t" $t "Blk" $ABlk)}}
            let row = m0 + (s % {{$AM4}}u) * 4u;
            let k = kl + (s / {{$AM4}}u) * 4u;
{{- range $i := seq 4}}
            ra{{$t}}_{{$i}} = rowA(min(row + {{$i}}u, mlast), k);
{{- end}}
        }
    }
{{- end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}
{{- template "gemm_slot" (dict "I" "    " "t" $t "Blk" $BBlk)}}
            let row = n0 + (s % {{$BN4}}u) * 4u;
            {{template "gemm_bk" $}}
{{- range $i := seq 4}}
            rb{{$t}}_{{$i}} = {{template "gemm_bload" (dict "i" $i "P" $)}};
{{- end}}
        }
    }
{{- end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
    {
        let s = li + {{mul $t 256}}u;
        rb{{$t}} = {{template "gemm_bslotload" $}};
    }
{{- end}}
{{- end}}
{{- end}}

