// graph_launch.cu: a decode step's graph started from the device. A host launch of a graph costs
// the host time per node (~0.4 us a node on slow hosts, and a decode graph holds ~300 kernels);
// one of a single-kernel graph does not. So each decode graph is instantiated for device launch,
// and the host launches a one-kernel graph whose thread tail-launches the step's graph, read from
// device memory that the step's metadata copy has just filled. The stream sees both as one
// launch: work behind it waits for the tail-launched graph (CUDA programming guide, "Device
// Graph Launch"). Device-side cudaGraphLaunch is the device runtime's: this file alone is
// compiled as relocatable device code and linked against cudadevrt.
#include "kernels/common.cuh"

__global__ void graph_launch_kernel(const unsigned long long *exec)
{
    // A launch that fails would leave the step unrun and its outputs stale: stop the stream
    // instead, so that the host's next synchronisation reports an error.
    if (cudaGraphLaunch((cudaGraphExec_t)*exec, cudaStreamGraphTailLaunch) != cudaSuccess) __trap();
}

cudaError_t k_graph_launch(const void *exec, cudaStream_t stream)
{
    graph_launch_kernel<<<1, 1, 0, stream>>>((const unsigned long long *)exec);
    return cudaGetLastError();
}
