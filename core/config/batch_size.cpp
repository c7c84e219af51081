#include "core/config/batch_size.h"

#include "core/config/config_error.h"

namespace zrt {
namespace {

constexpr const char* kTrain = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccum = "gradient_accumulation_steps";

// The value the file or the caller gives, with a note saying which.
std::optional<std::int64_t> given(const BatchSetting& s, const char* key, const std::string& source,
                                  std::vector<std::string>& notes) {
  if (s.file) {
    if (s.caller && *s.caller != *s.file)
      throw ConfigError(
          source, key,
          detail::cat("the file gives ", *s.file, " but the caller asks for ", *s.caller,
                      "; a number in the file is not overridden (write \"auto\" "
                      "in the file to let the caller choose)"));
    return s.file;
  }
  if (s.caller) {
    notes.push_back(detail::cat(key, ": ", s.fileAuto ? "\"auto\"" : "absent", " -> ", *s.caller,
                                " (from the caller)"));
    return s.caller;
  }
  return std::nullopt;
}

std::int64_t product(std::int64_t a, std::int64_t b, std::int64_t c, const std::string& source) {
  std::int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
    throw ConfigError(
        source, kTrain,
        detail::cat("batch sizes overflow: ", a, " * ", b, " * ", c, " does not fit in 64 bits"));
  return abc;
}

}  // namespace

BatchSizes resolveBatchSizes(const BatchRequest& request, int worldSize,
                             const std::string& source) {
  if (worldSize < 1)
    throw ConfigError(source, "", detail::cat("world size ", worldSize, " must be >= 1"));
  BatchSizes out;
  auto& notes = out.notes;
  auto train = given(request.train, kTrain, source, notes);
  auto micro = given(request.micro, kMicro, source, notes);
  auto accum = given(request.accum, kAccum, source, notes);
  const std::int64_t w = worldSize;
  std::string derivation;  // how a derived value came about, for the contradiction message

  auto derived = [&](const char* key, const BatchSetting& s, std::int64_t value,
                     const std::string& how) {
    notes.push_back(detail::cat(key, ": ", s.fileAuto ? "\"auto\"" : "absent", " -> ", value,
                                " (derived: ", how, ")"));
    derivation =
        detail::cat(" (", key, " was derived as ", how, ", rounded down as DeepSpeed does)");
    return value;
  };
  auto defaulted = [&](const char* key, const BatchSetting& s, std::int64_t value,
                       const char* why) {
    notes.push_back(
        detail::cat(key, ": ", s.fileAuto ? "\"auto\"" : "absent", " -> ", value, " (", why, ")"));
    return value;
  };

  // The same cases, in the same order, as DeepSpeed's _set_batch_related_parameters.
  if (train && micro && accum) {
    // All given: only the check below.
  } else if (train && micro) {
    accum = derived(kAccum, request.accum, *train / *micro / w,
                    detail::cat(*train, " / ", *micro, " / ", w));
  } else if (train && accum) {
    micro = derived(kMicro, request.micro, *train / w / *accum,
                    detail::cat(*train, " / ", w, " / ", *accum));
  } else if (micro && accum) {
    train = derived(kTrain, request.train, product(*micro, *accum, w, source),
                    detail::cat(*micro, " * ", *accum, " * ", w));
  } else if (train) {
    accum = defaulted(kAccum, request.accum, 1, "no accumulation, as DeepSpeed does");
    micro = derived(kMicro, request.micro, *train / w, detail::cat(*train, " / ", w));
  } else if (micro) {
    accum = defaulted(kAccum, request.accum, 1, "no accumulation, as DeepSpeed does");
    train = derived(kTrain, request.train, product(*micro, 1, w, source),
                    detail::cat(*micro, " * ", w));
  } else {
    // DeepSpeed stops here; "auto" files (and files with no batch keys) mean the caller decides,
    // and a caller that did not gets the smallest batch.
    micro = defaulted(kMicro, request.micro, 1,
                      "ZRT's default: neither train_batch_size nor a micro-batch is known");
    if (!accum) accum = defaulted(kAccum, request.accum, 1, "no accumulation");
    train = derived(kTrain, request.train, product(*micro, *accum, w, source),
                    detail::cat(*micro, " * ", *accum, " * ", w));
  }

  std::int64_t expected = product(*micro, *accum, w, source);
  if (*train < 1 || *micro < 1 || *accum < 1 || *train != expected) {
    throw ConfigError(source, kTrain,
                      detail::cat("batch sizes contradict: train_batch_size ", *train,
                                  " != train_micro_batch_size_per_gpu ", *micro,
                                  " * gradient_accumulation_steps ", *accum, " * world size ", w,
                                  " = ", expected, derivation,
                                  "; give values that multiply out, or leave one out (or "
                                  "\"auto\") to have it derived"));
  }
  out.train = *train;
  out.micro = *micro;
  out.accum = *accum;
  return out;
}

}  // namespace zrt
