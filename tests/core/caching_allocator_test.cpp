// The caching allocator, on the host device and on the strict one (device memory the host cannot
// touch, streams that run late): blocks are reused without a raw allocation, a block freed on a
// stream is reused by that stream at once and by another only after the free's event, the ledger
// shows reserved and in-use bytes apart, and out of memory gives the cache back, retries, and
// names the tag that asked.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/host_device.h"
#include "core/memory_ledger.h"
#include "core/strict_device.h"

using namespace zrt;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<Device> device(bool strict, MemoryLedger& ledger, std::uint64_t capacity) {
  if (strict) return std::make_unique<StrictDevice>(ledger, capacity, 300us);
  return std::make_unique<HostDevice>(ledger, capacity);
}

}  // namespace

TEST_CASE("a freed block is reused without a raw allocation; its data travels through streams") {
  for (bool strict : {false, true}) {
    CAPTURE(strict);
    MemoryLedger ledger;
    auto dev = device(strict, ledger, 1 << 20);
    CachingAllocator cache(*dev);
    auto stream = dev->createStream();
    void* first = nullptr;
    {
      CachedMemory m = cache.allocate(1000, MemTag::GatheredParameters, stream.get());
      REQUIRE(m);
      CHECK(m.bytes() == 1000);
      first = m.data();
    }
    CHECK(dev->rawAllocations() == 1);
    // A smaller size takes the block; a size less than half the block does not.
    CachedMemory again = cache.allocate(900, MemTag::Gradients, stream.get());
    CHECK(again.data() == first);
    CHECK(dev->rawAllocations() == 1);
    CachedMemory small = cache.allocate(100, MemTag::Gradients, stream.get());
    CHECK(small.data() != first);
    CHECK(dev->rawAllocations() == 2);
    // The reused block is ordinary device memory: a round trip through it keeps every byte.
    std::vector<std::uint8_t> in(900), out(900, 0);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 13 + 1);
    dev->copyAsync(again.data(), in.data(), in.size(), *stream);
    dev->copyAsync(out.data(), again.data(), out.size(), *stream);
    stream->synchronize();
    CHECK(out == in);
    const auto s = cache.stats();
    CHECK(s.rawAllocations == 2);
    CHECK(s.cacheHits == 1);
    CHECK(s.reservedBytes == 1000 + 100);
    CHECK(s.inUseBytes == 900 + 100);
    CHECK(s.cachedBytes == 0);
  }
}

TEST_CASE("a block freed on a stream: the same stream reuses it at once, another after its event") {
  for (bool strict : {false, true}) {
    CAPTURE(strict);
    MemoryLedger ledger;
    auto dev = device(strict, ledger, 1 << 20);
    CachingAllocator cache(*dev);
    auto a = dev->createStream();
    auto b = dev->createStream();
    // Stream a is held busy by a task that waits for `go`, so the event recorded at the free
    // cannot complete until the test says so: no timing decides the outcome.
    std::promise<void> go;
    std::shared_future<void> gate = go.get_future().share();
    dev->hostCallback(*a, [gate] {
      if (gate.wait_for(60s) != std::future_status::ready)
        throw TimeoutError("caching_allocator_test: the gate on stream a was never opened");
    });
    void* block = nullptr;
    {
      CachedMemory m = cache.allocate(4096, MemTag::CommBuckets, a.get());
      block = m.data();
    }
    {
      CachedMemory other = cache.allocate(4096, MemTag::CommBuckets, b.get());
      CHECK(other.data() != block);  // a's work may still use the block
      CachedMemory host = cache.allocate(4096, MemTag::CommBuckets);
      CHECK(host.data() != block);  // nor may a host-ordered user take it
      CachedMemory same = cache.allocate(4096, MemTag::CommBuckets, a.get());
      CHECK(same.data() == block);  // queued behind a's work: safe at once
    }
    CHECK(dev->rawAllocations() == 3);
    go.set_value();
    a->synchronize();
    // The block was freed on a again; now that a has drained, b may take it.
    CachedMemory later = cache.allocate(4096, MemTag::CommBuckets, b.get());
    CHECK(later.data() == block);
    CHECK(dev->rawAllocations() == 3);
    b->synchronize();
  }
}

TEST_CASE("the ledger shows reserved and in-use device bytes apart") {
  for (bool strict : {false, true}) {
    CAPTURE(strict);
    MemoryLedger ledger("rank0");
    auto dev = device(strict, ledger, 1 << 20);
    CachingAllocator cache(*dev);
    {
      CachedMemory m = cache.allocate(1000, MemTag::GatheredParameters);
      CHECK(ledger.get(MemTag::GatheredParameters, MemPlace::Device).current == 1000);
      CHECK(ledger.total(MemPlace::Device).current == 1000);
      CHECK(ledger.reserved().current == 1000);
      DeviceMemory plain = dev->allocate(3000, MemTag::Parameters);  // reserved and in use
      CHECK(ledger.reserved().current == 4000);
      CHECK(ledger.total(MemPlace::Device).current == 4000);
    }
    // Freed to the cache: no longer in use, still reserved; the table says both.
    CHECK(ledger.total(MemPlace::Device).current == 0);
    CHECK(ledger.total(MemPlace::Device).peak == 4000);
    CHECK(ledger.reserved().current == 1000);
    CHECK(ledger.reserved().peak == 4000);
    const std::string t = ledger.table();
    CAPTURE(t);
    CHECK(t.find("| reserved             |         1000 B / 3.91 KiB |") != std::string::npos);
    cache.emptyCache();
    CHECK(ledger.reserved().current == 0);
    CHECK(cache.stats().reservedBytes == 0);
  }
}

TEST_CASE("out of memory gives the cache back and retries, then names the tag that asked") {
  for (bool strict : {false, true}) {
    CAPTURE(strict);
    MemoryLedger ledger;
    auto dev = device(strict, ledger, 4000);
    CachingAllocator cache(*dev);
    auto stream = dev->createStream();
    cache.allocate(3072, MemTag::Activations, stream.get()).reset();
    CHECK(cache.stats().cachedBytes == 3072);
    // 1024 more does not fit beside the cached 3072 (and is too small to take that block): the
    // cache goes back to the device (after its event) and the retry succeeds.
    CachedMemory m = cache.allocate(1024, MemTag::Gradients, stream.get());
    CHECK(m);
    CHECK(cache.stats().cachedBytes == 0);
    CHECK(cache.stats().reservedBytes == 1024);
    CHECK(ledger.reserved().current == 1024);
    CHECK(dev->rawAllocations() == 2);
    std::string what;
    try {
      cache.allocate(3500, MemTag::OptimizerState, stream.get());
    } catch (const OutOfMemory& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("'optimizer state' asked for 3.42 KiB") != std::string::npos);
    CHECK(what.find("1.00 KiB in use") != std::string::npos);
    CHECK(what.find("memory ledger") != std::string::npos);  // the table follows
    CHECK(what.find("gradients") != std::string::npos);
    CHECK(cache.stats().inUseBytes == 1024);  // the failure left the cache consistent
  }
}

TEST_CASE("warming reserves only the blocks the cache lacks, and allocations then take them") {
  for (bool strict : {false, true}) {
    CAPTURE(strict);
    MemoryLedger ledger;
    auto dev = device(strict, ledger, 1 << 20);
    CachingAllocator cache(*dev);
    cache.allocate(4000, MemTag::GatheredParameters).reset();  // one 4000-byte block cached
    CHECK(cache.warm({3000, 3000, 500}, MemTag::GatheredParameters) == 3000 + 500);
    CHECK(dev->rawAllocations() == 3);
    CHECK(ledger.reserved().current == 4000 + 3000 + 500);
    CHECK(ledger.total(MemPlace::Device).current == 0);  // reserved, not in use
    CHECK(cache.warm({3000, 3000, 500}, MemTag::GatheredParameters) == 0);  // all there now
    CachedMemory a = cache.allocate(3000, MemTag::GatheredParameters);
    CachedMemory b = cache.allocate(3000, MemTag::GatheredParameters);
    CachedMemory c = cache.allocate(500, MemTag::GatheredParameters);
    CHECK(dev->rawAllocations() == 3);
    CHECK(cache.stats().cacheHits == 3);
    // A device that cannot give a block: warming stops quietly, the allocation will report.
    CHECK(cache.warm({2u << 20}, MemTag::GatheredParameters) == 0);
  }
}
