/*
 * nvg_layer.c — nvg's Vulkan layer: tensor cores (cooperative matrices) under wgpu.
 *
 * wgpu-native 29 builds every device with its experimental features off, so neither WGSL
 * cooperative matrices nor SPIR-V passthrough can be requested (docs/DESIGN.md §7, "Tensor
 * cores through a Vulkan layer"). This layer sits between wgpu and the driver in nvg's own
 * process (package gpu builds it on first use with the C compiler cgo uses, writes its JSON
 * manifest and sets VK_ADD_LAYER_PATH / VK_INSTANCE_LAYERS) and does two things:
 *
 *  1. vkCreateDevice: when the physical device lists VK_KHR_cooperative_matrix and supports
 *     its feature and vulkanMemoryModel (which cooperative-matrix SPIR-V declares), it adds
 *     the extension and turns both features on (in wgpu's VkPhysicalDeviceVulkan12Features
 *     when wgpu chained one — chaining VkPhysicalDeviceVulkanMemoryModelFeatures beside it
 *     would be invalid). Otherwise it records why not and creates the device as asked.
 *     Where the device also lists VK_NV_cooperative_matrix2 with the features nvg's
 *     coopmat2 kernels use (workgroup scope, flexible dimensions, tensor addressing,
 *     per-element operations) and wgpu enabled 16-bit storage, it enables that extension and
 *     those features too, and VK_EXT_pipeline_robustness where listed (for item 3); if the
 *     device cannot be created so, it is created with VK_KHR_cooperative_matrix alone.
 *  2. vkCreateShaderModule: a module whose OpEntryPoint name starts with "nvgcm_" (never
 *     "main": wgpu's own shaders are "main") and for which nvg registered SPIR-V under that
 *     exact name is created from the registered words instead. Everything else passes
 *     through untouched.
 *  3. vkCreateComputePipelines: a pipeline of a module swapped from words registered with
 *     NVG_NO_ROBUSTNESS (kernels that bound every access themselves, such as the coopmat2
 *     GEMM's clamped tensor loads) is created with robust buffer access off
 *     (VkPipelineRobustnessCreateInfoEXT), where the device took VK_EXT_pipeline_robustness;
 *     wgpu's own pipelines keep the device's robustness (naga relies on it).
 *
 * nvg reaches the same library with dlopen (gpu/vklayer.go) and calls the C API at the end
 * of this file: arm the layer (a process that never arms it, such as a child process that
 * inherited the environment, gets a pure pass-through layer), register replacements, and
 * read the state as JSON.
 *
 * No Vulkan headers are needed to build it: the few types, enums and structs used are
 * declared below, each as the Vulkan specification (1.4) and the loader-layer interface
 * (vk_layer.h, "Architecture of the Vulkan Loader Interfaces", LoaderLayerInterface.md)
 * define them. x86-64 and aarch64 Linux use the default C calling convention for Vulkan.
 *
 * Build: cc -shared -fPIC -O2 -fvisibility=hidden -o libnvg_vklayer.so nvg_layer.c -lpthread
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVG_EXPORT __attribute__((visibility("default")))

/* ---- Vulkan declarations (Vulkan 1.4 specification, chapter and struct names as there) ---- */

typedef int32_t VkResult;
#define VK_SUCCESS 0
#define VK_INCOMPLETE 5
#define VK_ERROR_OUT_OF_HOST_MEMORY (-1)
#define VK_ERROR_INITIALIZATION_FAILED (-3)
typedef uint32_t VkBool32;
typedef uint32_t VkFlags;
typedef int32_t VkStructureType;
typedef struct VkInstance_T *VkInstance;             /* dispatchable handles */
typedef struct VkPhysicalDevice_T *VkPhysicalDevice;
typedef struct VkDevice_T *VkDevice;
typedef uint64_t VkShaderModule;                     /* non-dispatchable handle */
typedef struct VkAllocationCallbacks VkAllocationCallbacks; /* passed through, never read */

/* VkStructureType values used here. */
#define VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO 16
#define VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO 29
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES 49
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_4_FEATURES 55
#define VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT 1000068000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_ROBUSTNESS_FEATURES_EXT 1000068001
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES 1000083000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV 1000593000
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV 1000593001
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV 1000593002
#define VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO 47
#define VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO 48
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES 51
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2 1000059000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 1000059001
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES 1000082000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES 1000094000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES 1000211000
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR 1000506000
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR 1000506001

typedef void (*PFN_vkVoidFunction)(void);
typedef PFN_vkVoidFunction (*PFN_vkGetInstanceProcAddr)(VkInstance, const char *);
typedef PFN_vkVoidFunction (*PFN_vkGetDeviceProcAddr)(VkDevice, const char *);

typedef struct VkBaseOutStructure {
    VkStructureType sType;
    struct VkBaseOutStructure *pNext;
} VkBaseOutStructure;

typedef struct VkInstanceCreateInfo {
    VkStructureType sType;
    const void *pNext;
    VkFlags flags;
    const void *pApplicationInfo;
    uint32_t enabledLayerCount;
    const char *const *ppEnabledLayerNames;
    uint32_t enabledExtensionCount;
    const char *const *ppEnabledExtensionNames;
} VkInstanceCreateInfo;

typedef struct VkDeviceCreateInfo {
    VkStructureType sType;
    const void *pNext;
    VkFlags flags;
    uint32_t queueCreateInfoCount;
    const void *pQueueCreateInfos;
    uint32_t enabledLayerCount;
    const char *const *ppEnabledLayerNames;
    uint32_t enabledExtensionCount;
    const char *const *ppEnabledExtensionNames;
    const void *pEnabledFeatures;
} VkDeviceCreateInfo;

typedef struct VkShaderModuleCreateInfo {
    VkStructureType sType;
    const void *pNext;
    VkFlags flags;
    size_t codeSize; /* bytes */
    const uint32_t *pCode;
} VkShaderModuleCreateInfo;

typedef struct VkExtensionProperties {
    char extensionName[256];
    uint32_t specVersion;
} VkExtensionProperties;

/* VkPhysicalDeviceProperties2: only apiVersion and deviceName are read; the rest
 * (pipelineCacheUUID, VkPhysicalDeviceLimits, VkPhysicalDeviceSparseProperties: 824 bytes in
 * all on x86-64) is reserved generously as 8-byte-aligned storage. */
typedef struct VkPhysicalDeviceProperties2 {
    VkStructureType sType;
    void *pNext;
    uint32_t apiVersion, driverVersion, vendorID, deviceID, deviceType;
    char deviceName[256];
    uint8_t pipelineCacheUUID[16];
    uint64_t limitsAndSparse[256];
} VkPhysicalDeviceProperties2;

typedef struct VkPhysicalDeviceSubgroupProperties {
    VkStructureType sType;
    void *pNext;
    uint32_t subgroupSize;
    VkFlags supportedStages, supportedOperations;
    VkBool32 quadOperationsInAllStages;
} VkPhysicalDeviceSubgroupProperties;

/* VkPhysicalDeviceFeatures2: VkPhysicalDeviceFeatures is 55 VkBool32. */
typedef struct VkPhysicalDeviceFeatures2 {
    VkStructureType sType;
    void *pNext;
    VkBool32 features[55];
} VkPhysicalDeviceFeatures2;

/* VkPhysicalDeviceVulkan12Features: 47 VkBool32 after the header; shaderFloat16 is the 8th,
 * vulkanMemoryModel the 42nd (index 41). */
#define V12_SHADER_FLOAT16 7
#define V12_VULKAN_MEMORY_MODEL 41
typedef struct VkPhysicalDeviceVulkan12Features {
    VkStructureType sType;
    void *pNext;
    VkBool32 f[47];
} VkPhysicalDeviceVulkan12Features;

typedef struct VkPhysicalDeviceShaderFloat16Int8Features {
    VkStructureType sType;
    void *pNext;
    VkBool32 shaderFloat16, shaderInt8;
} VkPhysicalDeviceShaderFloat16Int8Features;

typedef struct VkPhysicalDeviceVulkanMemoryModelFeatures {
    VkStructureType sType;
    void *pNext;
    VkBool32 vulkanMemoryModel, vulkanMemoryModelDeviceScope, vulkanMemoryModelAvailabilityVisibilityChains;
} VkPhysicalDeviceVulkanMemoryModelFeatures;

typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;

/* VkComponentTypeKHR and VkScopeKHR (VK_KHR_cooperative_matrix). */
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    int32_t AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    int32_t scope;
} VkCooperativeMatrixPropertiesKHR;

/* VK_NV_cooperative_matrix2. */
typedef struct VkPhysicalDeviceCooperativeMatrix2FeaturesNV {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrixWorkgroupScope, cooperativeMatrixFlexibleDimensions, cooperativeMatrixReductions,
        cooperativeMatrixConversions, cooperativeMatrixPerElementOperations, cooperativeMatrixTensorAddressing,
        cooperativeMatrixBlockLoads;
} VkPhysicalDeviceCooperativeMatrix2FeaturesNV;

typedef struct VkPhysicalDeviceCooperativeMatrix2PropertiesNV {
    VkStructureType sType;
    void *pNext;
    uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize, cooperativeMatrixFlexibleDimensionsMaxDimension,
        cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} VkPhysicalDeviceCooperativeMatrix2PropertiesNV;

typedef struct VkCooperativeMatrixFlexibleDimensionsPropertiesNV {
    VkStructureType sType;
    void *pNext;
    uint32_t MGranularity, NGranularity, KGranularity;
    int32_t AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    int32_t scope;
    uint32_t workgroupInvocations;
} VkCooperativeMatrixFlexibleDimensionsPropertiesNV;

/* VK_EXT_pipeline_robustness (VkPipelineRobustnessBufferBehaviorEXT 1: disabled). */
typedef struct VkPhysicalDevicePipelineRobustnessFeaturesEXT {
    VkStructureType sType;
    void *pNext;
    VkBool32 pipelineRobustness;
} VkPhysicalDevicePipelineRobustnessFeaturesEXT;
#define VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED 1
typedef struct VkPipelineRobustnessCreateInfoEXT {
    VkStructureType sType;
    const void *pNext;
    int32_t storageBuffers, uniformBuffers, vertexInputs, images;
} VkPipelineRobustnessCreateInfoEXT;

/* The first member of VkPhysicalDeviceVulkan11Features and VkPhysicalDevice16BitStorageFeatures
 * is storageBuffer16BitAccess. */
typedef struct VkStorage16Head {
    VkStructureType sType;
    void *pNext;
    VkBool32 storageBuffer16BitAccess;
} VkStorage16Head;

typedef uint64_t VkPipeline, VkPipelineCache, VkPipelineLayout; /* non-dispatchable handles */
typedef struct VkPipelineShaderStageCreateInfo {
    VkStructureType sType;
    const void *pNext;
    VkFlags flags;
    uint32_t stage;
    VkShaderModule module;
    const char *pName;
    const void *pSpecializationInfo;
} VkPipelineShaderStageCreateInfo;
typedef struct VkComputePipelineCreateInfo {
    VkStructureType sType;
    const void *pNext;
    VkFlags flags;
    VkPipelineShaderStageCreateInfo stage;
    VkPipelineLayout layout;
    VkPipeline basePipelineHandle;
    int32_t basePipelineIndex;
} VkComputePipelineCreateInfo;

typedef VkResult (*PFN_vkCreateInstance)(const VkInstanceCreateInfo *, const VkAllocationCallbacks *, VkInstance *);
typedef void (*PFN_vkDestroyInstance)(VkInstance, const VkAllocationCallbacks *);
typedef VkResult (*PFN_vkCreateDevice)(VkPhysicalDevice, const VkDeviceCreateInfo *, const VkAllocationCallbacks *, VkDevice *);
typedef void (*PFN_vkDestroyDevice)(VkDevice, const VkAllocationCallbacks *);
typedef VkResult (*PFN_vkEnumerateDeviceExtensionProperties)(VkPhysicalDevice, const char *, uint32_t *, VkExtensionProperties *);
typedef void (*PFN_vkGetPhysicalDeviceFeatures2)(VkPhysicalDevice, VkPhysicalDeviceFeatures2 *);
typedef void (*PFN_vkGetPhysicalDeviceProperties2)(VkPhysicalDevice, VkPhysicalDeviceProperties2 *);
typedef VkResult (*PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(VkPhysicalDevice, uint32_t *, VkCooperativeMatrixPropertiesKHR *);
typedef VkResult (*PFN_vkCreateShaderModule)(VkDevice, const VkShaderModuleCreateInfo *, const VkAllocationCallbacks *, VkShaderModule *);
typedef void (*PFN_vkDestroyShaderModule)(VkDevice, VkShaderModule, const VkAllocationCallbacks *);
typedef VkResult (*PFN_vkCreateComputePipelines)(VkDevice, VkPipelineCache, uint32_t, const VkComputePipelineCreateInfo *, const VkAllocationCallbacks *, VkPipeline *);
typedef VkResult (*PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)(VkPhysicalDevice, uint32_t *, VkCooperativeMatrixFlexibleDimensionsPropertiesNV *);

/* ---- The loader-layer interface (vk_layer.h) ---- */

#define VK_LAYER_LINK_INFO 0
typedef struct VkLayerInstanceLink {
    struct VkLayerInstanceLink *pNext;
    PFN_vkGetInstanceProcAddr pfnNextGetInstanceProcAddr;
    PFN_vkVoidFunction pfnNextGetPhysicalDeviceProcAddr;
} VkLayerInstanceLink;
typedef struct VkLayerInstanceCreateInfo {
    VkStructureType sType; /* VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO */
    const void *pNext;
    int32_t function; /* VkLayerFunction */
    union {
        VkLayerInstanceLink *pLayerInfo;
        void *other[2];
    } u;
} VkLayerInstanceCreateInfo;
typedef struct VkLayerDeviceLink {
    struct VkLayerDeviceLink *pNext;
    PFN_vkGetInstanceProcAddr pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr pfnNextGetDeviceProcAddr;
} VkLayerDeviceLink;
typedef struct VkLayerDeviceCreateInfo {
    VkStructureType sType; /* VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO */
    const void *pNext;
    int32_t function;
    union {
        VkLayerDeviceLink *pLayerInfo;
        void *other;
    } u;
} VkLayerDeviceCreateInfo;
#define LAYER_NEGOTIATE_INTERFACE_STRUCT 1
typedef struct VkNegotiateLayerInterface {
    int32_t sType; /* LAYER_NEGOTIATE_INTERFACE_STRUCT */
    void *pNext;
    uint32_t loaderLayerInterfaceVersion;
    PFN_vkGetInstanceProcAddr pfnGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr pfnGetDeviceProcAddr;
    PFN_vkVoidFunction pfnGetPhysicalDeviceProcAddr;
} VkNegotiateLayerInterface;

/* ---- State ---- */

#define NVG_PREFIX "nvgcm_"

/* Dispatchable objects start with the loader's dispatch-table pointer; objects of one
 * instance (its physical devices) or one device share it, so it is the lookup key. */
static void *key_of(const void *handle) { return *(void *const *)handle; }

struct instance_rec {
    struct instance_rec *next;
    void *key;
    VkInstance instance;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkDestroyInstance destroy;
};

struct device_rec {
    struct device_rec *next;
    void *key;
    PFN_vkGetDeviceProcAddr gdpa;
    PFN_vkDestroyDevice destroy;
    PFN_vkCreateShaderModule create_shader_module;
    PFN_vkDestroyShaderModule destroy_shader_module;
    PFN_vkCreateComputePipelines create_compute_pipelines;
    int coopmat;   /* the extension and its features were enabled on this device */
    int robust;    /* VK_EXT_pipeline_robustness was enabled (pipelines may turn robustness off) */
    VkShaderModule *norobust; /* modules swapped from NVG_NO_ROBUSTNESS words, not destroyed yet */
    size_t n_norobust, cap_norobust;
};

/* nvg_layer_register's flags. */
#define NVG_NO_ROBUSTNESS 1u

struct replacement {
    struct replacement *next;
    char *name;
    uint32_t *words;
    size_t nwords;
    unsigned flags; /* NVG_NO_ROBUSTNESS */
    unsigned swaps; /* shader modules created from it */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct instance_rec *instances;
static struct device_rec *devices;
static struct replacement *replacements;
static int armed;               /* nvg_layer_arm */
static unsigned n_instances, n_devices, n_swaps, n_misses, n_norobust_pipelines;
static char last_state[32768];  /* JSON of the last vkCreateDevice's decision (the types of a device that lists many) */

/* ---- Helpers ---- */

static const void *find_in_chain(const void *chain, VkStructureType t) {
    for (const VkBaseOutStructure *s = chain; s; s = s->pNext) {
        if (s->sType == t) {
            return s;
        }
    }
    return NULL;
}

static struct instance_rec *instance_for(const void *handle) {
    void *k = key_of(handle);
    for (struct instance_rec *r = instances; r; r = r->next) {
        if (r->key == k) {
            return r;
        }
    }
    return instances; /* the latest instance, if the keys differ (they should not) */
}

static struct device_rec *device_for(VkDevice d) {
    void *k = key_of(d);
    for (struct device_rec *r = devices; r; r = r->next) {
        if (r->key == k) {
            return r;
        }
    }
    return NULL;
}

static const char *component_name(int32_t t) {
    switch (t) { /* VkComponentTypeKHR */
    case 0: return "f16";
    case 1: return "f32";
    case 2: return "f64";
    case 3: return "s8";
    case 4: return "s16";
    case 5: return "s32";
    case 6: return "s64";
    case 7: return "u8";
    case 8: return "u16";
    case 9: return "u32";
    case 10: return "u64";
    case 1000141000: return "bf16";
    }
    return "other";
}

static const char *scope_name(int32_t s) {
    switch (s) { /* VkScopeKHR */
    case 1: return "device";
    case 2: return "workgroup";
    case 3: return "subgroup";
    case 5: return "queue-family";
    }
    return "other";
}

/* json_str appends s to out as a JSON string body (quotes and backslashes escaped, control
 * characters dropped). */
static void json_str(char *out, size_t cap, const char *s) {
    size_t n = strlen(out);
    for (; *s && n + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') {
            out[n++] = '\\';
        }
        if ((unsigned char)*s >= 0x20) {
            out[n++] = *s;
        }
    }
    out[n] = 0;
}

__attribute__((format(printf, 3, 4)))
static void appendf(char *out, size_t cap, const char *fmt, ...) {
    size_t n = strlen(out);
    if (n + 1 >= cap) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + n, cap - n, fmt, ap);
    va_end(ap);
}

/* ---- Instance ---- */

static PFN_vkVoidFunction nvg_GetInstanceProcAddr(VkInstance instance, const char *name);
static PFN_vkVoidFunction nvg_GetDeviceProcAddr(VkDevice device, const char *name);

static VkResult nvg_CreateInstance(const VkInstanceCreateInfo *ci, const VkAllocationCallbacks *alloc, VkInstance *out) {
    VkLayerInstanceCreateInfo *li = (VkLayerInstanceCreateInfo *)ci->pNext;
    while (li && !(li->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && li->function == VK_LAYER_LINK_INFO)) {
        li = (VkLayerInstanceCreateInfo *)li->pNext;
    }
    if (!li || !li->u.pLayerInfo) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    PFN_vkGetInstanceProcAddr gipa = li->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    li->u.pLayerInfo = li->u.pLayerInfo->pNext; /* the next layer's link */
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
    if (!create) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    VkResult res = create(ci, alloc, out);
    if (res != VK_SUCCESS) {
        return res;
    }
    struct instance_rec *r = calloc(1, sizeof *r);
    if (!r) {
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    r->key = key_of(*out);
    r->instance = *out;
    r->gipa = gipa;
    r->destroy = (PFN_vkDestroyInstance)gipa(*out, "vkDestroyInstance");
    pthread_mutex_lock(&mu);
    r->next = instances;
    instances = r;
    n_instances++;
    pthread_mutex_unlock(&mu);
    return VK_SUCCESS;
}

static void nvg_DestroyInstance(VkInstance instance, const VkAllocationCallbacks *alloc) {
    if (!instance) {
        return;
    }
    void *k = key_of(instance);
    PFN_vkDestroyInstance destroy = NULL;
    pthread_mutex_lock(&mu);
    for (struct instance_rec **p = &instances; *p; p = &(*p)->next) {
        if ((*p)->key == k) {
            struct instance_rec *r = *p;
            destroy = r->destroy;
            *p = r->next;
            free(r);
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (destroy) {
        destroy(instance, alloc);
    }
}

/* ---- Device ---- */

/* probe decides whether the device can take cooperative matrices, writing the reason into
 * why when not, and the device's properties into st (JSON members). */
static int probe(struct instance_rec *ir, VkPhysicalDevice pd, const VkDeviceCreateInfo *ci, char *why, size_t whycap, char *st, size_t stcap) {
    PFN_vkGetInstanceProcAddr gipa = ir->gipa;
    VkInstance in = ir->instance;
    PFN_vkGetPhysicalDeviceProperties2 props2 = (PFN_vkGetPhysicalDeviceProperties2)gipa(in, "vkGetPhysicalDeviceProperties2");
    if (!props2) {
        props2 = (PFN_vkGetPhysicalDeviceProperties2)gipa(in, "vkGetPhysicalDeviceProperties2KHR");
    }
    PFN_vkGetPhysicalDeviceFeatures2 feats2 = (PFN_vkGetPhysicalDeviceFeatures2)gipa(in, "vkGetPhysicalDeviceFeatures2");
    if (!feats2) {
        feats2 = (PFN_vkGetPhysicalDeviceFeatures2)gipa(in, "vkGetPhysicalDeviceFeatures2KHR");
    }
    PFN_vkEnumerateDeviceExtensionProperties exts = (PFN_vkEnumerateDeviceExtensionProperties)gipa(in, "vkEnumerateDeviceExtensionProperties");
    if (!props2 || !feats2 || !exts) {
        snprintf(why, whycap, "the Vulkan instance lacks vkGetPhysicalDeviceProperties2/Features2");
        return 0;
    }
    VkPhysicalDeviceSubgroupProperties sg = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, NULL, 0, 0, 0, 0};
    VkPhysicalDeviceProperties2 *pp = calloc(1, sizeof *pp);
    if (!pp) {
        snprintf(why, whycap, "out of host memory");
        return 0;
    }
    pp->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    pp->pNext = &sg;
    props2(pd, pp);
    uint32_t api = pp->apiVersion;
    appendf(st, stcap, "\"device\":\"");
    json_str(st, stcap, pp->deviceName);
    appendf(st, stcap, "\",\"api\":\"%u.%u.%u\",\"subgroup_size\":%u", (api >> 22) & 0x7f, (api >> 12) & 0x3ff, api & 0xfff, sg.subgroupSize);
    char dev[256];
    snprintf(dev, sizeof dev, "%s", pp->deviceName);
    free(pp);

    uint32_t n = 0;
    int has_ext = 0;
    if (exts(pd, NULL, &n, NULL) == VK_SUCCESS && n > 0) {
        VkExtensionProperties *e = calloc(n, sizeof *e);
        if (e && exts(pd, NULL, &n, e) >= VK_SUCCESS) {
            for (uint32_t i = 0; i < n; i++) {
                if (strcmp(e[i].extensionName, "VK_KHR_cooperative_matrix") == 0) {
                    has_ext = 1;
                }
            }
        }
        free(e);
    }
    appendf(st, stcap, ",\"extension\":%s", has_ext ? "true" : "false");
    if (!has_ext) {
        snprintf(why, whycap, "%s lacks VK_KHR_cooperative_matrix", dev);
        return 0;
    }
    if (((api >> 22) & 0x7f) == 1 && ((api >> 12) & 0x3ff) < 2) {
        snprintf(why, whycap, "%s is Vulkan %u.%u; the kernels need 1.2 (vulkanMemoryModel)", dev, (api >> 22) & 0x7f, (api >> 12) & 0x3ff);
        return 0;
    }

    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, NULL, 0, 0};
    VkPhysicalDeviceVulkanMemoryModelFeatures mm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES, &cm, 0, 0, 0};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, &mm, 0, 0};
    VkPhysicalDeviceFeatures2 f2;
    memset(&f2, 0, sizeof f2);
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &f16;
    feats2(pd, &f2);
    if (!cm.cooperativeMatrix || !mm.vulkanMemoryModel) {
        snprintf(why, whycap, "%s lists VK_KHR_cooperative_matrix but not the features cooperativeMatrix=%u vulkanMemoryModel=%u", dev, cm.cooperativeMatrix, mm.vulkanMemoryModel);
        return 0;
    }
    /* The kernels compute in f16: wgpu enables shaderFloat16 when nvg requests shader-f16. */
    const VkPhysicalDeviceVulkan12Features *v12 = find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    const VkPhysicalDeviceShaderFloat16Int8Features *h = find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
    if (!(v12 && v12->f[V12_SHADER_FLOAT16]) && !(h && h->shaderFloat16)) {
        snprintf(why, whycap, "the device was requested without shaderFloat16 (wgpu feature shader-f16)");
        return 0;
    }

    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR cmp =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)gipa(in, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    uint32_t np = 0;
    if (!cmp || cmp(pd, &np, NULL) != VK_SUCCESS || np == 0) {
        snprintf(why, whycap, "%s reports no cooperative matrix shapes", dev);
        return 0;
    }
    VkCooperativeMatrixPropertiesKHR *p = calloc(np, sizeof *p);
    if (!p) {
        snprintf(why, whycap, "out of host memory");
        return 0;
    }
    for (uint32_t i = 0; i < np; i++) {
        p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
    }
    cmp(pd, &np, p);
    appendf(st, stcap, ",\"shapes\":[");
    for (uint32_t i = 0; i < np; i++) {
        appendf(st, stcap, "%s{\"m\":%u,\"n\":%u,\"k\":%u,\"a\":\"%s\",\"b\":\"%s\",\"c\":\"%s\",\"result\":\"%s\",\"saturating\":%s,\"scope\":\"%s\"}",
                i ? "," : "", p[i].MSize, p[i].NSize, p[i].KSize, component_name(p[i].AType), component_name(p[i].BType),
                component_name(p[i].CType), component_name(p[i].ResultType), p[i].saturatingAccumulation ? "true" : "false",
                scope_name(p[i].scope));
    }
    appendf(st, stcap, "]");
    free(p);
    return 1;
}

/* extras is what probe2 found beyond VK_KHR_cooperative_matrix: whether to enable
 * VK_NV_cooperative_matrix2 with the features in cm2 (all the device supports), and
 * VK_EXT_pipeline_robustness. */
struct extras {
    int cm2, robust;
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV feat;
    char why[256]; /* why not coopmat2 ("" when cm2) */
};

static int listed(PFN_vkEnumerateDeviceExtensionProperties exts, VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    int found = 0;
    if (exts(pd, NULL, &n, NULL) == VK_SUCCESS && n > 0) {
        VkExtensionProperties *e = calloc(n, sizeof *e);
        if (e && exts(pd, NULL, &n, e) >= VK_SUCCESS) {
            for (uint32_t i = 0; i < n && !found; i++) {
                found = strcmp(e[i].extensionName, name) == 0;
            }
        }
        free(e);
    }
    return found;
}

/* probe2 decides the extras on a device probe accepted, appending what it found to st as
 * JSON members: "coopmat2_features" (the seven VkBool32 in order), "coopmat2_limits"
 * (max_workgroup, max_dimension, reserved_shared bytes) and "flex_shapes" ([{m, n, k (the
 * granularities), a, b, c, result, saturating, scope, invocations}]). */
static void probe2(struct instance_rec *ir, VkPhysicalDevice pd, const VkDeviceCreateInfo *ci, struct extras *x, char *st, size_t stcap) {
    PFN_vkGetInstanceProcAddr gipa = ir->gipa;
    VkInstance in = ir->instance;
    PFN_vkGetPhysicalDeviceFeatures2 feats2 = (PFN_vkGetPhysicalDeviceFeatures2)gipa(in, "vkGetPhysicalDeviceFeatures2");
    PFN_vkGetPhysicalDeviceProperties2 props2 = (PFN_vkGetPhysicalDeviceProperties2)gipa(in, "vkGetPhysicalDeviceProperties2");
    PFN_vkEnumerateDeviceExtensionProperties exts = (PFN_vkEnumerateDeviceExtensionProperties)gipa(in, "vkEnumerateDeviceExtensionProperties");
    memset(x, 0, sizeof *x);
    if (!feats2 || !props2 || !exts) {
        snprintf(x->why, sizeof x->why, "the Vulkan 1.1 queries are missing");
        return;
    }
    /* Pipeline robustness: the extension and its feature, unless wgpu chained the struct
     * that holds the feature (Vulkan 1.4's, or the extension's own) itself. */
    if (listed(exts, pd, "VK_EXT_pipeline_robustness") &&
        !find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_4_FEATURES) &&
        !find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_ROBUSTNESS_FEATURES_EXT)) {
        VkPhysicalDevicePipelineRobustnessFeaturesEXT pr = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_ROBUSTNESS_FEATURES_EXT, NULL, 0};
        VkPhysicalDeviceFeatures2 f2;
        memset(&f2, 0, sizeof f2);
        f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        f2.pNext = &pr;
        feats2(pd, &f2);
        x->robust = pr.pipelineRobustness != 0;
    }
    if (!listed(exts, pd, "VK_NV_cooperative_matrix2")) {
        snprintf(x->why, sizeof x->why, "the device lacks VK_NV_cooperative_matrix2");
        return;
    }
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV f = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV, NULL, 0, 0, 0, 0, 0, 0, 0};
    VkPhysicalDeviceFeatures2 f2;
    memset(&f2, 0, sizeof f2);
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &f;
    feats2(pd, &f2);
    appendf(st, stcap, ",\"coopmat2_features\":[%u,%u,%u,%u,%u,%u,%u]", f.cooperativeMatrixWorkgroupScope, f.cooperativeMatrixFlexibleDimensions,
            f.cooperativeMatrixReductions, f.cooperativeMatrixConversions, f.cooperativeMatrixPerElementOperations,
            f.cooperativeMatrixTensorAddressing, f.cooperativeMatrixBlockLoads);
    VkPhysicalDeviceCooperativeMatrix2PropertiesNV cp = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV, NULL, 0, 0, 0};
    VkPhysicalDeviceProperties2 *pp = calloc(1, sizeof *pp);
    if (pp) {
        pp->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        pp->pNext = &cp;
        props2(pd, pp);
        free(pp);
    }
    appendf(st, stcap, ",\"coopmat2_limits\":{\"max_workgroup\":%u,\"max_dimension\":%u,\"reserved_shared\":%u}",
            cp.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize, cp.cooperativeMatrixFlexibleDimensionsMaxDimension,
            cp.cooperativeMatrixWorkgroupScopeReservedSharedMemory);
    PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV flex =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)gipa(in, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
    uint32_t np = 0;
    if (flex && flex(pd, &np, NULL) == VK_SUCCESS && np > 0) {
        VkCooperativeMatrixFlexibleDimensionsPropertiesNV *q = calloc(np, sizeof *q);
        if (q) {
            for (uint32_t i = 0; i < np; i++) {
                q[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV;
            }
            if (flex(pd, &np, q) >= VK_SUCCESS) {
                appendf(st, stcap, ",\"flex_shapes\":[");
                for (uint32_t i = 0; i < np; i++) {
                    appendf(st, stcap, "%s{\"m\":%u,\"n\":%u,\"k\":%u,\"a\":\"%s\",\"b\":\"%s\",\"c\":\"%s\",\"result\":\"%s\",\"saturating\":%s,\"scope\":\"%s\",\"invocations\":%u}",
                            i ? "," : "", q[i].MGranularity, q[i].NGranularity, q[i].KGranularity, component_name(q[i].AType),
                            component_name(q[i].BType), component_name(q[i].CType), component_name(q[i].ResultType),
                            q[i].saturatingAccumulation ? "true" : "false", scope_name(q[i].scope), q[i].workgroupInvocations);
                }
                appendf(st, stcap, "]");
            }
            free(q);
        }
    }
    if (!f.cooperativeMatrixWorkgroupScope || !f.cooperativeMatrixFlexibleDimensions || !f.cooperativeMatrixTensorAddressing ||
        !f.cooperativeMatrixPerElementOperations) {
        snprintf(x->why, sizeof x->why, "VK_NV_cooperative_matrix2 lacks a feature nvg's kernels use (workgroup scope, flexible dimensions, tensor addressing, per-element operations)");
        return;
    }
    if (find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV)) {
        snprintf(x->why, sizeof x->why, "wgpu chained VkPhysicalDeviceCooperativeMatrix2FeaturesNV itself");
        return;
    }
    /* The kernels' buffers are f16 arrays: 16-bit storage, which wgpu enables with shader-f16. */
    const VkStorage16Head *v11 = find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
    const VkStorage16Head *s16 = find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
    if (!(v11 && v11->storageBuffer16BitAccess) && !(s16 && s16->storageBuffer16BitAccess)) {
        snprintf(x->why, sizeof x->why, "the device was requested without storageBuffer16BitAccess");
        return;
    }
    x->cm2 = 1;
    x->feat = f;
    x->feat.pNext = NULL;
}

/* create_with calls the next vkCreateDevice with VK_KHR_cooperative_matrix and its features
 * (cooperativeMatrix, vulkanMemoryModel) added to ci, plus VK_NV_cooperative_matrix2 with the
 * features cm2 when not NULL and VK_EXT_pipeline_robustness with its feature when robust.
 * Features go into the structs wgpu chained where it chained them (set for the call, then
 * restored: they are wgpu's memory), else into structs prepended to the chain. note: record
 * where (st's "memory_model_in", "coopmat_feature_in"). */
static VkResult create_with(PFN_vkCreateDevice create, VkPhysicalDevice pd, const VkDeviceCreateInfo *ci, const VkAllocationCallbacks *alloc,
                            VkDevice *out, const VkPhysicalDeviceCooperativeMatrix2FeaturesNV *cm2, int robust, char *st, size_t stcap, int note) {
    uint32_t ne = ci->enabledExtensionCount;
    const char **names = calloc(ne + 3, sizeof *names);
    if (!names) {
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    int have = 0, have2 = 0, haver = 0;
    for (uint32_t i = 0; i < ne; i++) {
        names[i] = ci->ppEnabledExtensionNames[i];
        have |= strcmp(names[i], "VK_KHR_cooperative_matrix") == 0;
        have2 |= strcmp(names[i], "VK_NV_cooperative_matrix2") == 0;
        haver |= strcmp(names[i], "VK_EXT_pipeline_robustness") == 0;
    }
    if (!have) {
        names[ne++] = "VK_KHR_cooperative_matrix";
    }
    if (cm2 && !have2) {
        names[ne++] = "VK_NV_cooperative_matrix2";
    }
    if (robust && !haver) {
        names[ne++] = "VK_EXT_pipeline_robustness";
    }
    VkDeviceCreateInfo c = *ci;
    c.enabledExtensionCount = ne;
    c.ppEnabledExtensionNames = names;
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, NULL, 1, 0};
    VkPhysicalDeviceVulkanMemoryModelFeatures mm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES, NULL, 1, 0, 0};
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV f2;
    VkPhysicalDevicePipelineRobustnessFeaturesEXT pr = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_ROBUSTNESS_FEATURES_EXT, NULL, 1};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR *wcm =
        (VkPhysicalDeviceCooperativeMatrixFeaturesKHR *)find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR);
    VkPhysicalDeviceVulkan12Features *v12 =
        (VkPhysicalDeviceVulkan12Features *)find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    VkPhysicalDeviceVulkanMemoryModelFeatures *wmm =
        (VkPhysicalDeviceVulkanMemoryModelFeatures *)find_in_chain(ci->pNext, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
    VkBool32 old_cm = 0, old_mm = 0;
    const void *head = ci->pNext;
    if (note) {
        const char *where = v12 ? "VkPhysicalDeviceVulkan12Features" : wmm ? "wgpu's VkPhysicalDeviceVulkanMemoryModelFeatures" : "a prepended VkPhysicalDeviceVulkanMemoryModelFeatures";
        appendf(st, stcap, ",\"memory_model_in\":\"%s\",\"coopmat_feature_in\":\"%s\"", where,
                wcm ? "wgpu's VkPhysicalDeviceCooperativeMatrixFeaturesKHR" : "a prepended VkPhysicalDeviceCooperativeMatrixFeaturesKHR");
    }
    if (wcm) {
        old_cm = wcm->cooperativeMatrix;
        wcm->cooperativeMatrix = 1;
    } else {
        cm.pNext = (void *)head;
        head = &cm;
    }
    if (v12) {
        old_mm = v12->f[V12_VULKAN_MEMORY_MODEL];
        v12->f[V12_VULKAN_MEMORY_MODEL] = 1;
    } else if (wmm) {
        old_mm = wmm->vulkanMemoryModel;
        wmm->vulkanMemoryModel = 1;
    } else {
        mm.pNext = (void *)head;
        head = &mm;
    }
    if (cm2) { /* probe2 checked that wgpu chained none */
        f2 = *cm2;
        f2.pNext = (void *)head;
        head = &f2;
    }
    if (robust) { /* likewise */
        pr.pNext = (void *)head;
        head = &pr;
    }
    c.pNext = head;
    VkResult res = create(pd, &c, alloc, out);
    if (wcm) {
        wcm->cooperativeMatrix = old_cm;
    }
    if (v12) {
        v12->f[V12_VULKAN_MEMORY_MODEL] = old_mm;
    } else if (wmm) {
        wmm->vulkanMemoryModel = old_mm;
    }
    free(names);
    return res;
}

static VkResult nvg_CreateDevice(VkPhysicalDevice pd, const VkDeviceCreateInfo *ci, const VkAllocationCallbacks *alloc, VkDevice *out) {
    VkLayerDeviceCreateInfo *ld = (VkLayerDeviceCreateInfo *)ci->pNext;
    while (ld && !(ld->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && ld->function == VK_LAYER_LINK_INFO)) {
        ld = (VkLayerDeviceCreateInfo *)ld->pNext;
    }
    if (!ld || !ld->u.pLayerInfo) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    PFN_vkGetInstanceProcAddr gipa = ld->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr gdpa = ld->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    ld->u.pLayerInfo = ld->u.pLayerInfo->pNext;

    pthread_mutex_lock(&mu);
    struct instance_rec *ir = instance_for(pd);
    int arm = armed;
    pthread_mutex_unlock(&mu);
    if (!ir) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    PFN_vkCreateDevice create = (PFN_vkCreateDevice)gipa(ir->instance, "vkCreateDevice");
    if (!create) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }

    char why[512] = "";
    char st[sizeof last_state] = "";
    int want = 0;
    if (!arm) {
        snprintf(why, sizeof why, "the layer was not armed by nvg in this process");
    } else {
        want = probe(ir, pd, ci, why, sizeof why, st, sizeof st);
    }

    struct extras x;
    memset(&x, 0, sizeof x);
    snprintf(x.why, sizeof x.why, "tensor cores are off");
    if (want) {
        probe2(ir, pd, ci, &x, st, sizeof st);
    }
    VkResult res = VK_SUCCESS;
    int enabled = 0, cm2 = 0, robust = 0;
    /* Tries: with the extras, then with VK_KHR_cooperative_matrix alone, then as asked. */
    int extra = want && (x.cm2 || x.robust);
    if (extra) {
        res = create_with(create, pd, ci, alloc, out, x.cm2 ? &x.feat : NULL, x.robust, st, sizeof st, 1);
        if (res == VK_SUCCESS) {
            enabled = 1;
            cm2 = x.cm2;
            robust = x.robust;
        } else {
            snprintf(x.why, sizeof x.why, "vkCreateDevice with VK_NV_cooperative_matrix2 / VK_EXT_pipeline_robustness failed (VkResult %d); created without", res);
        }
    }
    if (want && !enabled) {
        res = create_with(create, pd, ci, alloc, out, NULL, 0, st, sizeof st, !extra);
        if (res == VK_SUCCESS) {
            enabled = 1;
        } else {
            snprintf(why, sizeof why, "vkCreateDevice with VK_KHR_cooperative_matrix failed (VkResult %d); created without", res);
        }
    }
    if (!enabled) {
        res = create(pd, ci, alloc, out);
    }
    if (res != VK_SUCCESS) {
        return res;
    }
    struct device_rec *r = calloc(1, sizeof *r);
    if (!r) {
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    r->key = key_of(*out);
    r->gdpa = gdpa;
    r->destroy = (PFN_vkDestroyDevice)gdpa(*out, "vkDestroyDevice");
    r->create_shader_module = (PFN_vkCreateShaderModule)gdpa(*out, "vkCreateShaderModule");
    r->destroy_shader_module = (PFN_vkDestroyShaderModule)gdpa(*out, "vkDestroyShaderModule");
    r->create_compute_pipelines = (PFN_vkCreateComputePipelines)gdpa(*out, "vkCreateComputePipelines");
    r->coopmat = enabled;
    r->robust = robust;
    pthread_mutex_lock(&mu);
    r->next = devices;
    devices = r;
    n_devices++;
    last_state[0] = 0;
    appendf(last_state, sizeof last_state, "{\"enabled\":%s,\"reason\":\"", enabled ? "true" : "false");
    json_str(last_state, sizeof last_state, enabled ? "" : why);
    appendf(last_state, sizeof last_state, "\",\"coopmat2\":%s,\"coopmat2_reason\":\"", cm2 ? "true" : "false");
    json_str(last_state, sizeof last_state, cm2 ? "" : x.why);
    appendf(last_state, sizeof last_state, "\",\"pipeline_robustness\":%s", robust ? "true" : "false");
    appendf(last_state, sizeof last_state, "%s%s}", st[0] ? "," : "", st);
    pthread_mutex_unlock(&mu);
    return VK_SUCCESS;
}

static void nvg_DestroyDevice(VkDevice device, const VkAllocationCallbacks *alloc) {
    if (!device) {
        return;
    }
    void *k = key_of(device);
    PFN_vkDestroyDevice destroy = NULL;
    pthread_mutex_lock(&mu);
    for (struct device_rec **p = &devices; *p; p = &(*p)->next) {
        if ((*p)->key == k) {
            struct device_rec *r = *p;
            destroy = r->destroy;
            *p = r->next;
            free(r->norobust);
            free(r);
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (destroy) {
        destroy(device, alloc);
    }
}

/* entry_name copies the name of the first OpEntryPoint of a SPIR-V module into name
 * (empty when there is none or the module is malformed). */
static void entry_name(const uint32_t *w, size_t nwords, char *name, size_t cap) {
    name[0] = 0;
    if (nwords < 5 || w[0] != 0x07230203u) { /* SPIR-V magic */
        return;
    }
    for (size_t i = 5; i < nwords;) {
        uint32_t op = w[i] & 0xffffu, wc = w[i] >> 16;
        if (wc == 0 || i + wc > nwords) {
            return;
        }
        if (op == 15 && wc > 3) { /* OpEntryPoint ExecutionModel EntryId Name... */
            const char *s = (const char *)&w[i + 3];
            size_t max = (wc - 3) * 4, n = 0;
            while (n < max && s[n] && n + 1 < cap) {
                name[n] = s[n];
                n++;
            }
            name[n] = 0;
            return;
        }
        if (op == 54) { /* OpFunction: past the entry points */
            return;
        }
        i += wc;
    }
}

static VkResult nvg_CreateShaderModule(VkDevice device, const VkShaderModuleCreateInfo *ci, const VkAllocationCallbacks *alloc, VkShaderModule *out) {
    pthread_mutex_lock(&mu);
    struct device_rec *r = device_for(device);
    PFN_vkCreateShaderModule next = r ? r->create_shader_module : NULL;
    struct replacement *rep = NULL;
    if (r && r->coopmat) {
        char name[128];
        entry_name(ci->pCode, ci->codeSize / 4, name, sizeof name);
        if (strncmp(name, NVG_PREFIX, strlen(NVG_PREFIX)) == 0) {
            for (struct replacement *p = replacements; p; p = p->next) {
                if (strcmp(p->name, name) == 0) {
                    rep = p;
                    break;
                }
            }
            if (!rep) {
                n_misses++;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    if (!next) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    if (!rep) {
        return next(device, ci, alloc, out);
    }
    /* Replacements are never freed (nvg_layer_register keeps the first words of a name), so
     * rep->words stays valid without the lock. */
    VkShaderModuleCreateInfo c = *ci;
    c.codeSize = rep->nwords * 4;
    c.pCode = rep->words;
    VkResult res = next(device, &c, alloc, out);
    if (res == VK_SUCCESS) {
        pthread_mutex_lock(&mu);
        rep->swaps++;
        n_swaps++;
        struct device_rec *d = device_for(device);
        if (d && d->robust && (rep->flags & NVG_NO_ROBUSTNESS)) {
            if (d->n_norobust == d->cap_norobust) {
                size_t cap = d->cap_norobust ? 2 * d->cap_norobust : 16;
                VkShaderModule *m = realloc(d->norobust, cap * sizeof *m);
                if (m) {
                    d->norobust = m;
                    d->cap_norobust = cap;
                }
            }
            if (d->n_norobust < d->cap_norobust) { /* else (no memory) the pipeline stays robust */
                d->norobust[d->n_norobust++] = *out;
            }
        }
        pthread_mutex_unlock(&mu);
    }
    return res;
}

static void nvg_DestroyShaderModule(VkDevice device, VkShaderModule module, const VkAllocationCallbacks *alloc) {
    pthread_mutex_lock(&mu);
    struct device_rec *r = device_for(device);
    PFN_vkDestroyShaderModule next = r ? r->destroy_shader_module : NULL;
    for (size_t i = 0; r && i < r->n_norobust; i++) {
        if (r->norobust[i] == module) {
            r->norobust[i] = r->norobust[--r->n_norobust];
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (next) {
        next(device, module, alloc);
    }
}

/* nvg_CreateComputePipelines creates the pipelines of modules swapped from NVG_NO_ROBUSTNESS
 * words with robust buffer (storage and uniform) access off: a copy of their create infos
 * with a VkPipelineRobustnessCreateInfoEXT in front of each one's chain. */
static VkResult nvg_CreateComputePipelines(VkDevice device, VkPipelineCache cache, uint32_t n, const VkComputePipelineCreateInfo *infos,
                                           const VkAllocationCallbacks *alloc, VkPipeline *out) {
    pthread_mutex_lock(&mu);
    struct device_rec *r = device_for(device);
    PFN_vkCreateComputePipelines next = r ? r->create_compute_pipelines : NULL;
    int any = 0;
    for (uint32_t i = 0; r && i < n && !any; i++) {
        for (size_t j = 0; j < r->n_norobust && !any; j++) {
            any = infos[i].stage.module == r->norobust[j];
        }
    }
    VkComputePipelineCreateInfo *c = NULL;
    VkPipelineRobustnessCreateInfoEXT *rb = NULL;
    if (any) {
        c = calloc(n, sizeof *c);
        rb = calloc(n, sizeof *rb);
        if (c && rb) {
            for (uint32_t i = 0; i < n; i++) {
                c[i] = infos[i];
                for (size_t j = 0; j < r->n_norobust; j++) {
                    if (infos[i].stage.module == r->norobust[j]) {
                        rb[i].sType = VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT;
                        rb[i].pNext = infos[i].pNext;
                        rb[i].storageBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED;
                        rb[i].uniformBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED;
                        c[i].pNext = &rb[i];
                        n_norobust_pipelines++;
                        break;
                    }
                }
            }
        }
    }
    pthread_mutex_unlock(&mu);
    if (!next) {
        free(c);
        free(rb);
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    VkResult res = next(device, cache, n, c && rb ? c : infos, alloc, out);
    free(c);
    free(rb);
    return res;
}

/* ---- Dispatch ---- */

static PFN_vkVoidFunction nvg_GetDeviceProcAddr(VkDevice device, const char *name) {
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) {
        return (PFN_vkVoidFunction)nvg_GetDeviceProcAddr;
    }
    if (strcmp(name, "vkCreateShaderModule") == 0) {
        return (PFN_vkVoidFunction)nvg_CreateShaderModule;
    }
    if (strcmp(name, "vkDestroyDevice") == 0) {
        return (PFN_vkVoidFunction)nvg_DestroyDevice;
    }
    if (strcmp(name, "vkDestroyShaderModule") == 0) {
        return (PFN_vkVoidFunction)nvg_DestroyShaderModule;
    }
    if (strcmp(name, "vkCreateComputePipelines") == 0) {
        return (PFN_vkVoidFunction)nvg_CreateComputePipelines;
    }
    pthread_mutex_lock(&mu);
    struct device_rec *r = device_for(device);
    PFN_vkGetDeviceProcAddr gdpa = r ? r->gdpa : NULL;
    pthread_mutex_unlock(&mu);
    return gdpa ? gdpa(device, name) : NULL;
}

static PFN_vkVoidFunction nvg_GetInstanceProcAddr(VkInstance instance, const char *name) {
    if (strcmp(name, "vkGetInstanceProcAddr") == 0) {
        return (PFN_vkVoidFunction)nvg_GetInstanceProcAddr;
    }
    if (strcmp(name, "vkCreateInstance") == 0) {
        return (PFN_vkVoidFunction)nvg_CreateInstance;
    }
    if (strcmp(name, "vkDestroyInstance") == 0) {
        return (PFN_vkVoidFunction)nvg_DestroyInstance;
    }
    if (strcmp(name, "vkCreateDevice") == 0) {
        return (PFN_vkVoidFunction)nvg_CreateDevice;
    }
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) {
        return (PFN_vkVoidFunction)nvg_GetDeviceProcAddr;
    }
    if (strcmp(name, "vkCreateShaderModule") == 0) {
        return (PFN_vkVoidFunction)nvg_CreateShaderModule;
    }
    if (strcmp(name, "vkDestroyDevice") == 0) {
        return (PFN_vkVoidFunction)nvg_DestroyDevice;
    }
    if (strcmp(name, "vkDestroyShaderModule") == 0) {
        return (PFN_vkVoidFunction)nvg_DestroyShaderModule;
    }
    if (strcmp(name, "vkCreateComputePipelines") == 0) {
        return (PFN_vkVoidFunction)nvg_CreateComputePipelines;
    }
    if (!instance) {
        return NULL;
    }
    pthread_mutex_lock(&mu);
    struct instance_rec *r = instance_for(instance);
    PFN_vkGetInstanceProcAddr gipa = r ? r->gipa : NULL;
    pthread_mutex_unlock(&mu);
    return gipa ? gipa(instance, name) : NULL;
}

/* The loader's entry point (loader-layer interface version 2). */
NVG_EXPORT VkResult vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *p) {
    if (!p || p->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT || p->loaderLayerInterfaceVersion < 2) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    p->loaderLayerInterfaceVersion = 2;
    p->pfnGetInstanceProcAddr = nvg_GetInstanceProcAddr;
    p->pfnGetDeviceProcAddr = nvg_GetDeviceProcAddr;
    p->pfnGetPhysicalDeviceProcAddr = NULL;
    return VK_SUCCESS;
}

/* ---- nvg's C API (dlopen/dlsym from gpu/vklayer.go) ---- */

/* nvg_layer_arm turns the layer's work on (on ≠ 0) or off for devices created afterwards. */
NVG_EXPORT void nvg_layer_arm(int on) {
    pthread_mutex_lock(&mu);
    armed = on != 0;
    pthread_mutex_unlock(&mu);
}

/* nvg_layer_register stores the SPIR-V words under name (which must start with "nvgcm_"):
 * a shader module whose entry point has that name is created from these words; flags
 * NVG_NO_ROBUSTNESS (1): its pipelines are created with robust buffer access off, where the
 * device took VK_EXT_pipeline_robustness. A name keeps its first words and flags (nvg
 * registers a name once; replacing words that a module may be reading would race). Returns
 * 0, or −1 for a bad name or no memory. */
NVG_EXPORT int nvg_layer_register(const char *name, const uint32_t *words, size_t nwords, unsigned flags) {
    if (!name || strncmp(name, NVG_PREFIX, strlen(NVG_PREFIX)) != 0 || !words || nwords < 5) {
        return -1;
    }
    pthread_mutex_lock(&mu);
    for (struct replacement *p = replacements; p; p = p->next) {
        if (strcmp(p->name, name) == 0) {
            pthread_mutex_unlock(&mu);
            return 0;
        }
    }
    struct replacement *r = calloc(1, sizeof *r);
    char *n = strdup(name);
    uint32_t *w = malloc(nwords * 4);
    if (!r || !n || !w) {
        free(r);
        free(n);
        free(w);
        pthread_mutex_unlock(&mu);
        return -1;
    }
    memcpy(w, words, nwords * 4);
    r->name = n;
    r->words = w;
    r->nwords = nwords;
    r->flags = flags;
    r->next = replacements;
    replacements = r;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* nvg_layer_swaps returns how many shader modules were created from name's words. */
NVG_EXPORT unsigned nvg_layer_swaps(const char *name) {
    unsigned n = 0;
    pthread_mutex_lock(&mu);
    for (struct replacement *p = replacements; p; p = p->next) {
        if (strcmp(p->name, name) == 0) {
            n = p->swaps;
        }
    }
    pthread_mutex_unlock(&mu);
    return n;
}

/* nvg_layer_state writes the layer's state as one JSON object into buf (at most cap bytes,
 * NUL-terminated) and returns its length: whether it is armed, the counts of instances and
 * devices it saw, of modules it swapped (and of nvgcm_ modules without a registration) and of
 * pipelines it created with robust buffer access off ("norobust_pipelines"), and
 * "last_device": the last vkCreateDevice's decision ({"enabled", "reason", "coopmat2",
 * "coopmat2_reason", "pipeline_robustness", "device", "api", "subgroup_size", "extension",
 * "shapes": [{m, n, k, a, b, c, result, saturating, scope}], probe2's "coopmat2_features",
 * "coopmat2_limits" and "flex_shapes", and where the features were set: "memory_model_in",
 * "coopmat_feature_in"}), or null before any device. */
NVG_EXPORT size_t nvg_layer_state(char *buf, size_t cap) {
    char tmp[sizeof last_state + 256];
    pthread_mutex_lock(&mu);
    snprintf(tmp, sizeof tmp, "{\"armed\":%s,\"instances\":%u,\"devices\":%u,\"swaps\":%u,\"misses\":%u,\"norobust_pipelines\":%u,\"last_device\":%s}",
             armed ? "true" : "false", n_instances, n_devices, n_swaps, n_misses, n_norobust_pipelines, last_state[0] ? last_state : "null");
    pthread_mutex_unlock(&mu);
    size_t n = strlen(tmp);
    if (buf && cap > 0) {
        snprintf(buf, cap, "%s", tmp);
    }
    return n;
}
