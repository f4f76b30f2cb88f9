/*
 * A stand-in for the NVIDIA driver library, for importing SGLang's speculative workers on a
 * machine without a GPU. sgl_kernel's extension links these driver symbols; the dynamic
 * loader only needs them to exist. Every one returns CUDA_ERROR_NO_DEVICE, so nothing can
 * mistake this for a GPU. No sizing logic runs here: the tests only need the imports.
 */
#define CUDA_ERROR_NO_DEVICE 100
#define STUB(name) int name(void) { return CUDA_ERROR_NO_DEVICE; }

STUB(cuCtxFromGreenCtx)
STUB(cuCtxPopCurrent_v2)
STUB(cuCtxPushCurrent_v2)
STUB(cuDevResourceGenerateDesc)
STUB(cuDevSmResourceSplitByCount)
STUB(cuDeviceGetDevResource)
STUB(cuDriverGetVersion)
STUB(cuGetErrorString)
STUB(cuGetProcAddress_v2)
STUB(cuGreenCtxCreate)
STUB(cuGreenCtxDestroy)
STUB(cuGreenCtxGetDevResource)
STUB(cuInit)
STUB(cuMemAddressFree)
STUB(cuMemGetAddressRange_v2)
STUB(cuMemRelease)
STUB(cuMemRetainAllocationHandle)
STUB(cuMemSetAccess)
STUB(cuMemUnmap)
STUB(cuPointerGetAttribute)
STUB(cuStreamCreate)
