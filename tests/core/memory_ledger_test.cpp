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
