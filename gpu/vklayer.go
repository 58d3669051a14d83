package gpu

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// The Vulkan layer (gpu/vklayer/nvg_layer.c; DESIGN.md §7 "Tensor cores through a Vulkan
// layer") is built from source on first use with the C compiler cgo uses, cached under the
// user cache directory by the source's hash, and put in front of the driver for nvg's own
// process through VK_ADD_LAYER_PATH and VK_INSTANCE_LAYERS before the first wgpu instance.
// nvg then dlopens the same library to arm it, register replacement SPIR-V and read its state.

//go:embed vklayer/nvg_layer.c
var layerSource []byte

// layerName is the layer's name in its manifest and in VK_INSTANCE_LAYERS.
const layerName = "VK_LAYER_NVG_tensor_cores"

var (
	layerOnce sync.Once
	layerLib  *vkLayer
	layerErr  error
	// layerDeviceMu serialises device creation with the read of the layer's state, whose
	// "last_device" is the decision of the latest vkCreateDevice in the process.
	layerDeviceMu sync.Mutex
)

// tensorCoresEnv is NVG_TENSOR_CORES: "off" (or 0, false, no) keeps the layer out of the
// process; "on" (or 1, true, yes) forces the cooperative-matrix kernels on CPU adapters too
// (the CI's Mesa 26 step); unset or "auto": GPUs only.
func tensorCoresEnv() string {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("NVG_TENSOR_CORES"))) {
	case "off", "0", "false", "no":
		return "off"
	case "on", "1", "true", "yes":
		return "on"
	}
	return "auto"
}

// loadLayer builds (or finds in the cache), dlopens and arms the layer and sets the Vulkan
// loader's environment, once per process. The error says in one line why tensor cores are
// off (opted out, no compiler, build failure, dlopen failure).
func loadLayer() (*vkLayer, error) {
	layerOnce.Do(func() {
		if tensorCoresEnv() == "off" {
			layerErr = errors.New("NVG_TENSOR_CORES=off")
			return
		}
		if runtime.GOOS != "linux" {
			layerErr = fmt.Errorf("the Vulkan layer is built for Linux only (this is %s)", runtime.GOOS)
			return
		}
		dir, err := buildLayer()
		if err != nil {
			layerErr = err
			return
		}
		lib, err := openLayer(filepath.Join(dir, layerLibName))
		if err != nil {
			layerErr = err
			return
		}
		lib.setArmed(true)
		prependEnv("VK_ADD_LAYER_PATH", dir)
		appendEnv("VK_INSTANCE_LAYERS", layerName)
		layerLib = lib
	})
	return layerLib, layerErr
}

// prependEnv puts v before the list in the environment variable k (':'-separated), keeping
// the user's entries; appendEnv puts it after them. Neither adds v twice.
func prependEnv(k, v string) { setListEnv(k, v, true) }
func appendEnv(k, v string)  { setListEnv(k, v, false) }

func setListEnv(k, v string, front bool) {
	old := os.Getenv(k)
	for _, e := range strings.Split(old, ":") {
		if e == v {
			return
		}
	}
	switch {
	case old == "":
		os.Setenv(k, v)
	case front:
		os.Setenv(k, v+":"+old)
	default:
		os.Setenv(k, old+":"+v)
	}
}

const (
	layerLibName      = "libnvg_vklayer.so"
	layerManifestName = "nvg_vklayer.json"
)

// layerCacheDir is the cache directory of this source's build:
// os.UserCacheDir()/nvg/vklayer-<hash of the source, the manifest and GOARCH> (else the temp
// dir's nvg-cache-<uid>).
func layerCacheDir() string {
	h := sha256.Sum256(append(append(append([]byte(nil), layerSource...), layerManifest()...), runtime.GOARCH...))
	base, err := os.UserCacheDir()
	if err != nil || base == "" {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("nvg-cache-%d", os.Getuid()))
	}
	return filepath.Join(base, "nvg", "vklayer-"+hex.EncodeToString(h[:8]))
}

// cCompiler returns the C compiler command: $CC (split into words, as cgo does), else cc,
// else gcc on PATH.
func cCompiler() ([]string, error) {
	if cc := strings.Fields(os.Getenv("CC")); len(cc) > 0 {
		return cc, nil
	}
	for _, c := range []string{"cc", "gcc"} {
		if p, err := exec.LookPath(c); err == nil {
			return []string{p}, nil
		}
	}
	return nil, errors.New("no C compiler to build the Vulkan layer ($CC unset, no cc or gcc on PATH)")
}

// buildLayer returns the directory holding the compiled layer and its manifest, compiling
// it there first when the cache has no complete copy. Several processes may build at once:
// each compiles into its own temporary directory beside the final one and renames it into
// place; a loser of the race removes its copy and uses the winner's.
func buildLayer() (string, error) {
	dir := layerCacheDir()
	if layerComplete(dir) {
		return dir, nil
	}
	cc, err := cCompiler()
	if err != nil {
		return "", err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("Vulkan layer cache: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".vklayer-build-*")
	if err != nil {
		return "", fmt.Errorf("Vulkan layer cache: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	src := filepath.Join(tmp, "nvg_layer.c")
	if err := os.WriteFile(src, layerSource, 0o644); err != nil {
		return "", fmt.Errorf("Vulkan layer cache: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string(nil), cc[1:]...), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
		"-o", filepath.Join(tmp, layerLibName), src, "-lpthread")
	out, err := exec.CommandContext(ctx, cc[0], args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i] + " …"
		}
		return "", fmt.Errorf("building the Vulkan layer with %s failed: %v: %s", cc[0], err, msg)
	}
	if err := os.WriteFile(filepath.Join(tmp, layerManifestName), layerManifest(), 0o644); err != nil {
		return "", fmt.Errorf("Vulkan layer cache: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if layerComplete(dir) { // another process won the race
			return dir, nil
		}
		return "", fmt.Errorf("Vulkan layer cache: %w", err)
	}
	return dir, nil
}

// layerComplete reports whether dir holds both the library and the manifest (a directory
// appears whole, by rename, so both or neither).
func layerComplete(dir string) bool {
	for _, f := range []string{layerLibName, layerManifestName} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			return false
		}
	}
	return true
}

// layerManifest is the layer's JSON manifest (the Vulkan loader's layer manifest format
// 1.1.2). The library path is relative to the manifest's folder, so a built cache folder can
// be moved (or carried to a machine without a C compiler, found there through
// XDG_CACHE_HOME); nvg dlopens the same file by its absolute path, which glibc recognises as
// the object the loader opened.
func layerManifest() []byte {
	lib := "./" + layerLibName
	m := map[string]any{
		"file_format_version": "1.1.2",
		"layer": map[string]any{
			"name":                   layerName,
			"type":                   "GLOBAL",
			"library_path":           lib,
			"api_version":            "1.3.0",
			"implementation_version": "1",
			"description":            "nvg: cooperative-matrix (tensor core) kernels under wgpu",
		},
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	return append(b, '\n')
}

// layerState is the layer's JSON state (nvg_layer_state in gpu/vklayer/nvg_layer.c).
type layerState struct {
	Armed     bool `json:"armed"`
	Instances int  `json:"instances"`
	Devices   int  `json:"devices"`
	Swaps     int  `json:"swaps"`
	Misses    int  `json:"misses"`
	// NoRobust counts the pipelines created with robust buffer access off (coopmat2 kernels).
	NoRobust   int               `json:"norobust_pipelines"`
	LastDevice *layerDeviceState `json:"last_device"`
}

type layerDeviceState struct {
	Enabled      bool       `json:"enabled"`
	Reason       string     `json:"reason"`
	Device       string     `json:"device"`
	API          string     `json:"api"`
	SubgroupSize int        `json:"subgroup_size"`
	Extension    bool       `json:"extension"`
	Shapes       []CoopType `json:"shapes"`
	// VK_NV_cooperative_matrix2: whether the layer enabled it (and why not), the device's
	// seven features in the extension's order, its limits and flexible-dimension shapes;
	// PipelineRobustness: VK_EXT_pipeline_robustness was enabled.
	Coopmat2           bool            `json:"coopmat2"`
	Coopmat2Reason     string          `json:"coopmat2_reason"`
	Coopmat2Features   []int           `json:"coopmat2_features"`
	Coopmat2Limits     *Coopmat2Limits `json:"coopmat2_limits"`
	FlexShapes         []CoopFlexType  `json:"flex_shapes"`
	PipelineRobustness bool            `json:"pipeline_robustness"`
	// Where the layer set vulkanMemoryModel and cooperativeMatrix (wgpu's structs or its own).
	MemoryModelIn    string `json:"memory_model_in"`
	CoopmatFeatureIn string `json:"coopmat_feature_in"`
}

// newInstance creates the wgpu instance (without a descriptor: DESIGN §7). When the layer is
// loaded in nvg but the Vulkan loader did not put it into the instance — a loader older than
// VK_ADD_LAYER_PATH (1.3.2xx; Debian bookworm's 1.3.239 has it) — it adds the layer's folder to
// VK_LAYER_PATH as well and creates the instance again (VK_LAYER_PATH replaces the loader's
// default search for explicit layers, hence only then).
func newInstance(lay *vkLayer) *wgpu.Instance {
	var before int
	if lay != nil {
		st, _ := lay.state()
		before = st.Instances
	}
	inst := wgpu.CreateInstance(nil)
	if lay == nil {
		return inst
	}
	if st, err := lay.state(); err != nil || st.Instances > before {
		return inst
	}
	dir := filepath.Dir(lay.path)
	for _, e := range strings.Split(os.Getenv("VK_LAYER_PATH"), ":") {
		if e == dir {
			return inst
		}
	}
	inst.Release()
	prependEnv("VK_LAYER_PATH", dir)
	return wgpu.CreateInstance(nil)
}
