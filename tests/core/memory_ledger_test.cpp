#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "core/error.h"
#include "core/memory_ledger.h"

using namespace zrt;

TEST_CASE("ledger keeps current and peak per tag and place") {
  MemoryLedger ledger("t");
  ledger.charge(MemTag::Parameters, MemPlace::Device, 1000);
  ledger.charge(MemTag::Gradients, MemPlace::Device, 500);
  ledger.release(MemTag::Gradients, MemPlace::Device, 500);
  ledger.charge(MemTag::OptimizerState, MemPlace::Host, 300);

  CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).current == 1000);
  CHECK(ledger.get(MemTag::Gradients, MemPlace::Device).current == 0);
  CHECK(ledger.get(MemTag::Gradients, MemPlace::Device).peak == 500);
  CHECK(ledger.total(MemPlace::Device).current == 1000);
  CHECK(ledger.total(MemPlace::Device).peak == 1500);
  CHECK(ledger.total(MemPlace::Host).current == 300);
  CHECK(ledger.total(MemPlace::Nvme).peak == 0);
}

TEST_CASE("peak of the total is the peak of the sum, not the sum of peaks") {
  MemoryLedger ledger;
  ledger.charge(MemTag::Parameters, MemPlace::Device, 100);
  ledger.release(MemTag::Parameters, MemPlace::Device, 100);
  ledger.charge(MemTag::Gradients, MemPlace::Device, 100);
  CHECK(ledger.total(MemPlace::Device).peak == 100);
  ledger.resetPeaks();
  CHECK(ledger.get(MemTag::Parameters, MemPlace::Device).peak == 0);
  CHECK(ledger.get(MemTag::Gradients, MemPlace::Device).peak == 100);
}

TEST_CASE("releasing more than charged is an error naming the tag and place") {
  MemoryLedger ledger("x");
  ledger.charge(MemTag::Activations, MemPlace::PinnedHost, 10);
  try {
    ledger.release(MemTag::Activations, MemPlace::PinnedHost, 11);
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("activations") != std::string::npos);
    CHECK(what.find("pinned host") != std::string::npos);
  }
  CHECK(ledger.get(MemTag::Activations, MemPlace::PinnedHost).current == 10);
}

TEST_CASE("LedgerCharge is RAII and move-only") {
  MemoryLedger ledger;
  {
    LedgerCharge a(ledger, MemTag::SwapBuffers, MemPlace::Nvme, 4096);
    CHECK(ledger.total(MemPlace::Nvme).current == 4096);
    LedgerCharge b = std::move(a);
    CHECK(a.bytes() == 0);
    CHECK(ledger.total(MemPlace::Nvme).current == 4096);
  }
  CHECK(ledger.total(MemPlace::Nvme).current == 0);
  CHECK(ledger.total(MemPlace::Nvme).peak == 4096);
}

TEST_CASE("ledger is exact under concurrent charges") {
  MemoryLedger ledger;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        ledger.charge(MemTag::CommBuckets, MemPlace::Host, 3);
        ledger.release(MemTag::CommBuckets, MemPlace::Host, 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ledger.get(MemTag::CommBuckets, MemPlace::Host).current == 4u * 10000u * 2u);
}

TEST_CASE("table lists every tag and place with current and peak") {
  MemoryLedger ledger("rank0");
  ledger.charge(MemTag::Parameters, MemPlace::Device, 3u << 20);
  std::string t = ledger.table();
  for (const char* word : {"parameters", "gradients", "optimizer state", "comm buckets",
                           "swap buffers", "activations", "other", "device", "pinned host",
                           "nvme", "total", "3.00 MiB / 3.00 MiB", "rank0"}) {
    CHECK_MESSAGE(t.find(word) != std::string::npos, word);
  }
}

TEST_CASE("every line of the table has the same width, whatever the figures") {
  MemoryLedger ledger("rank0");
  // The widest figure formatBytes makes (a byte short of 1 MiB: "1024.00 KiB") beside narrow ones.
  ledger.charge(MemTag::Other, MemPlace::Device, 1024 * 1024 - 1);
  ledger.charge(MemTag::Activations, MemPlace::PinnedHost, 1023 * 1024 + 1000);
  ledger.charge(MemTag::Parameters, MemPlace::Nvme, 5);
  const std::string t = ledger.table();
  CHECK(t.find("1024.00 KiB / 1024.00 KiB") != std::string::npos);
  std::size_t width = 0, lines = 0;
  for (std::size_t at = 0; at < t.size();) {
    const std::size_t end = t.find('\n', at);
    REQUIRE(end != std::string::npos);
    if (width == 0) width = end - at;
    CHECK_MESSAGE(end - at == width, t.substr(at, end - at));
    at = end + 1;
    ++lines;
  }
  CHECK(lines == 6 + static_cast<std::size_t>(kNumMemTags) + 2);
}
