#include "core/memory_ledger.h"

#include <cstdio>
#include <exception>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace zrt {

std::string_view nameOf(MemTag tag) {
  switch (tag) {
    case MemTag::Parameters: return "parameters";
    case MemTag::GatheredParameters: return "parameters, gathered";
    case MemTag::Gradients: return "gradients";
    case MemTag::OptimizerState: return "optimizer state";
    case MemTag::CommBuckets: return "comm buckets";
    case MemTag::SwapBuffers: return "swap buffers";
    case MemTag::Activations: return "activations";
    case MemTag::Other: return "other";
  }
  return "?";
}

std::string_view nameOf(MemPlace place) {
  switch (place) {
    case MemPlace::Device: return "device";
    case MemPlace::PinnedHost: return "pinned host";
    case MemPlace::Host: return "host";
    case MemPlace::Nvme: return "nvme";
  }
  return "?";
}

MemoryLedger::MemoryLedger(std::string name) : name_(std::move(name)) {}

void MemoryLedger::charge(MemTag tag, MemPlace place, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  Counter& c = cells_[static_cast<int>(tag)][static_cast<int>(place)];
  c.current += bytes;
  if (c.current > c.peak) c.peak = c.current;
  Counter& t = totals_[static_cast<int>(place)];
  t.current += bytes;
  if (t.current > t.peak) t.peak = t.current;
}

void MemoryLedger::release(MemTag tag, MemPlace place, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  Counter& c = cells_[static_cast<int>(tag)][static_cast<int>(place)];
  ZRT_ENFORCE_LE(bytes, c.current, "ledger '", name_, "' releases more ", nameOf(tag), " bytes on ",
                 nameOf(place), " than it holds");
  c.current -= bytes;
  totals_[static_cast<int>(place)].current -= bytes;
}

void MemoryLedger::reserve(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  reserved_.current += bytes;
  if (reserved_.current > reserved_.peak) reserved_.peak = reserved_.current;
}

void MemoryLedger::unreserve(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  ZRT_ENFORCE_LE(bytes, reserved_.current, "ledger '", name_,
                 "' gives back more reserved device bytes than it holds");
  reserved_.current -= bytes;
}

MemoryLedger::Counter MemoryLedger::reserved() const {
  std::lock_guard lock(mu_);
  return reserved_;
}

MemoryLedger::Counter MemoryLedger::get(MemTag tag, MemPlace place) const {
  std::lock_guard lock(mu_);
  return cells_[static_cast<int>(tag)][static_cast<int>(place)];
}

MemoryLedger::Counter MemoryLedger::total(MemPlace place) const {
  std::lock_guard lock(mu_);
  return totals_[static_cast<int>(place)];
}

void MemoryLedger::resetPeaks() {
  std::lock_guard lock(mu_);
  for (auto& row : cells_)
    for (auto& c : row) c.peak = c.current;
  for (auto& t : totals_) t.peak = t.current;
  reserved_.peak = reserved_.current;
}

std::string MemoryLedger::table() const {
  std::lock_guard lock(mu_);
  // A cell holds "current / peak", each at most 11 characters ("1024.00 KiB", a byte short of
  // 1 MiB): 25 in all, so every line of the table has the same width whatever the figures.
  constexpr int kTag = 20, kCell = 25, kPlaces = kNumMemPlaces;
  static_assert(kPlaces == 4, "the row format below names four places");
  constexpr int kInner = kTag + kPlaces * (kCell + 3);  // the title spans every column
  std::string rule = "|" + std::string(kTag + 2, '-');
  for (int p = 0; p < kPlaces; ++p) rule += "+" + std::string(kCell + 2, '-');
  rule += "|\n";
  char line[256];
  std::string out = rule;
  std::snprintf(line, sizeof line, "| %-*s |\n", kInner,
                detail::cat("memory ledger '", name_, "' (current / peak)").c_str());
  out += line;
  out += rule;
  std::snprintf(line, sizeof line, "| %-*s | %-*s | %-*s | %-*s | %-*s |\n", kTag, "tag", kCell,
                "device", kCell, "pinned host", kCell, "host", kCell, "nvme");
  out += line;
  out += rule;
  auto row = [&](const char* name, const Counter* cells) {
    std::string c[kPlaces];
    for (int p = 0; p < kPlaces; ++p) c[p] = formatBytes(cells[p].current) + " / " + formatBytes(cells[p].peak);
    std::snprintf(line, sizeof line, "| %-*s | %*s | %*s | %*s | %*s |\n", kTag, name, kCell,
                  c[0].c_str(), kCell, c[1].c_str(), kCell, c[2].c_str(), kCell, c[3].c_str());
    out += line;
  };
  for (int t = 0; t < kNumMemTags; ++t)
    row(std::string(nameOf(static_cast<MemTag>(t))).c_str(), cells_[t].data());
  out += rule;
  row("total", totals_.data());
  out += rule;
  if (reserved_.peak > 0) {
    // Bytes obtained from the device backend; the total row above is the part in use.
    const Counter none[kPlaces] = {reserved_, {}, {}, {}};
    row("reserved", none);
    out += rule;
  }
  return out;
}

LedgerCharge::LedgerCharge(MemoryLedger& ledger, MemTag tag, MemPlace place, std::uint64_t bytes)
    : ledger_(&ledger), tag_(tag), place_(place), bytes_(bytes) {
  ledger_->charge(tag_, place_, bytes_);
}

LedgerCharge::~LedgerCharge() { reset(); }

LedgerCharge::LedgerCharge(LedgerCharge&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)),
      tag_(other.tag_),
      place_(other.place_),
      bytes_(std::exchange(other.bytes_, 0)) {}

LedgerCharge& LedgerCharge::operator=(LedgerCharge&& other) noexcept {
  if (this != &other) {
    reset();
    ledger_ = std::exchange(other.ledger_, nullptr);
    tag_ = other.tag_;
    place_ = other.place_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void LedgerCharge::reset() {
  if (ledger_ && bytes_) {
    // release() only throws on a ledger bug; a destructor must not throw, so log it instead.
    try {
      ledger_->release(tag_, place_, bytes_);
    } catch (const std::exception& e) {
      logError(e.what());
    }
  }
  ledger_ = nullptr;
  bytes_ = 0;
}

}  // namespace zrt
