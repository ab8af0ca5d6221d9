// A compute device's limits, measured in-process through the backend interface: the GPU-side
// counterpart of machine_limits.hpp (a GPU's GEMV and decode are bounded by its own memory, not the
// host's triad).
#pragma once

namespace kiln::backend {
class Device;
}

namespace kiln::bench {

/** The device's copy bandwidth (bytes read + written per second, GB/s): a SLICE of a whole `mib`
 *  MiB tensor, which the Vulkan backend records as one vkCmdCopyBuffer (the driver's own copy),
 *  8 per compute() so the submit cost is amortized, best of `reps`. */
double device_copy_gbs(backend::Device& dev, int mib = 1024, int reps = 10);

/** Whether `dev` is a GPU (discrete or integrated) whose memory, not the host's, bounds a kernel. */
bool is_gpu(const backend::Device& dev);

}  // namespace kiln::bench
