// A user's program built against the installed package only.
#include <zrt/core/shard.h>
#include <zrt/core/device.h>
#include <zrt/core/memory_ledger.h>

#include <cstdio>

int main() {
  zrt::MemoryLedger ledger("consumer");
  auto dev = zrt::makeDevice("host:1M", ledger);
  auto mem = dev->allocate(1000, zrt::MemTag::Parameters);
  auto shard = zrt::shardOf(10, 4, 3);
  bool ok = ledger.total(zrt::MemPlace::Device).current == 1000 && shard.begin == 9 &&
            shard.count == 3 && shard.valid == 1;
  std::printf("%s\n", ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 1;
}
