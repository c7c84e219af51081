#include "core/device.h"

#include <atomic>
#include <cstdlib>
#include <utility>

#include "core/error.h"
#include "core/host_device.h"
#include "core/log.h"
#include "core/strict_device.h"
#include "core/units.h"
#include "core/elementwise.h"
#include "core/build_config.h"
#if ZRT_HAVE_CUDA
#include "core/cuda/cuda_device.h"
#endif

namespace zrt {

DeviceMemory::DeviceMemory(Device* device, void* ptr, std::size_t bytes, MemTag tag,
                           MemPlace place, bool inUse)
    : device_(device), ptr_(ptr), bytes_(bytes), tag_(tag), place_(place), inUse_(inUse) {}

DeviceMemory::~DeviceMemory() { reset(); }

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      tag_(other.tag_),
      place_(other.place_),
      inUse_(other.inUse_) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = std::exchange(other.device_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tag_ = other.tag_;
    place_ = other.place_;
    inUse_ = other.inUse_;
  }
  return *this;
}

namespace {
std::atomic<bool> g_keepFreed{false};
}  // namespace

void DeviceMemory::keepFreedMemory() { g_keepFreed = true; }

void DeviceMemory::reset() {
  if (!device_) return;
  // After keepFreedMemory the process is ending and something may still view it: not freed.
  if (!g_keepFreed) {
    if (place_ == MemPlace::Device) device_->rawFree(ptr_, bytes_);
    else device_->rawFreePinned(ptr_, bytes_);
  }
  try {
    if (place_ == MemPlace::Device) device_->ledger().unreserve(bytes_);
    if (inUse_) device_->ledger().release(tag_, place_, bytes_);
  } catch (const std::exception& e) {
    logError(e.what());
  }
  device_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

void* Device::rawDevice(std::size_t bytes, MemTag tag) {
  if (!bytes) return nullptr;
  void* p = nullptr;
  try {
    p = rawAllocateTagged(bytes, tag);
  } catch (const OutOfMemory& e) {
    // The backend's message has the figures and the ledger; say who asked first.
    ZRT_THROW(OutOfMemory, "allocating ", formatBytes(bytes), " for '", nameOf(tag), "': ",
              withoutRankPrefix(e.what()));
  }
  rawAllocations_.fetch_add(1);
  ledger_->reserve(bytes);
  return p;
}

DeviceMemory Device::allocate(std::size_t bytes, MemTag tag) {
  void* p = rawDevice(bytes, tag);
  ledger_->charge(tag, MemPlace::Device, bytes);
  return DeviceMemory(this, p, bytes, tag, MemPlace::Device, true);
}

DeviceMemory Device::reserve(std::size_t bytes, MemTag askedBy) {
  void* p = rawDevice(bytes, askedBy);
  return DeviceMemory(this, p, bytes, askedBy, MemPlace::Device, false);
}

DeviceMemory Device::allocatePinned(std::size_t bytes, MemTag tag) {
  void* p = bytes ? rawAllocatePinned(bytes) : nullptr;
  ledger_->charge(tag, MemPlace::PinnedHost, bytes);
  return DeviceMemory(this, p, bytes, tag, MemPlace::PinnedHost, true);
}

void Device::throwOutOfMemory(std::size_t bytes, std::string_view what, std::uint64_t inUse,
                              std::uint64_t limit) const {
  ZRT_THROW(OutOfMemory, name(), " is out of ", what, " memory: tried to allocate ",
            formatBytes(bytes), " with ", formatBytes(inUse), " in use of ", formatBytes(limit),
            " (", formatBytes(limit > inUse ? limit - inUse : 0), " free)\n", ledger_->table());
}

void Device::launch(const ElementwiseArgs& args, Stream& stream) {
  checkElementwise(args);
  if (args.count == 0) return;
  if (!hostReadsDeviceMemory())
    ZRT_THROW(InvalidArgument, name(), " cannot run the element-wise ", nameOf(args.op),
              " on its memory from the host, and has no launcher of its own");
  hostCallback(stream, [args] { runElementwiseOnHost(args); });
}

void Device::launchHost(std::string_view what, std::vector<KernelBuffer> buffers, HostKernel kernel,
                        Stream& stream) {
  if (!hostReadsDeviceMemory())
    ZRT_THROW(InvalidArgument, name(), " cannot run ", what,
              ": it is host code, and this device's memory is out of the host's reach");
  std::vector<void*> addresses;
  addresses.reserve(buffers.size());
  for (const KernelBuffer& b : buffers) addresses.push_back(const_cast<void*>(b.data));
  hostCallback(stream, [k = std::move(kernel), a = std::move(addresses)] { k(a); });
}

std::unique_ptr<Device> makeDevice(const std::string& spec, MemoryLedger& ledger) {
  std::string kind = spec.substr(0, spec.find(':'));
  std::string arg = spec.find(':') == std::string::npos ? "" : spec.substr(spec.find(':') + 1);
  if (kind == "host" || kind == "host-strict") {
    std::uint64_t capacity = 16ull << 30;
    if (!arg.empty()) capacity = parseBytes(arg, "host device capacity");
    else if (const char* env = std::getenv("ZRT_HOST_DEVICE_MEMORY"); env && *env)
      capacity = parseBytes(env, "ZRT_HOST_DEVICE_MEMORY");
    if (kind == "host-strict") return std::make_unique<StrictDevice>(ledger, capacity);
    return std::make_unique<HostDevice>(ledger, capacity);
  }
  if (kind == "cuda") {
#if ZRT_HAVE_CUDA
    int ordinal = 0;
    if (!arg.empty()) {
      try {
        ordinal = std::stoi(arg);
      } catch (const std::exception&) {
        ZRT_THROW(InvalidArgument, "bad device spec '", spec, "': expected cuda:<ordinal>");
      }
    }
    return std::make_unique<CudaDevice>(ledger, ordinal);
#else
    ZRT_THROW(InvalidArgument, "device '", spec,
              "' asked for, but this build of ZRT has no CUDA (configure with -DZRT_CUDA=ON)");
#endif
  }
  ZRT_THROW(InvalidArgument, "unknown device spec '", spec,
            "': expected host, host:<capacity>, host-strict, host-strict:<capacity>, "
            "cuda or cuda:<ordinal>");
}

bool cudaDeviceAvailable() { return visibleCudaDevices() > 0; }

int visibleCudaDevices() {
#if ZRT_HAVE_CUDA
  return cudaDeviceCount();
#else
  return 0;
#endif
}

}  // namespace zrt
