// ConfigSection: typed reads from one JSON object of a config ("zero_optimization",
// "zero_optimization.offload_param", ...), each naming its JSON path in errors. The few readers
// (readInt, readDouble, readBool, readBytes, readString, readEnum, readPaths) share one set of
// rules, so every key of every section is validated the same way:
//   - numbers may be written as strings ("2e8"); integer keys reject fractional values;
//   - "auto" is accepted only where the reader is told so, and then means the default (noted);
//   - a setting may have aliases (thread_count for intra_op_parallelism); giving two with
//     different values is an error;
//   - finish() rejects every key no reader asked for and ignore() did not list, suggesting the
//     nearest known key.
// Thread-safety: none; one section is read by one thread while a config is loaded.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zrt {

// What reading a whole config collects besides values.
struct ConfigLog {
  std::string source;                // file name for errors
  std::vector<std::string> notes;    // how "auto" and absent values were resolved
  std::vector<std::string> ignored;  // paths of keys accepted but not acted on
};

// Whether a key takes "auto" (DeepSpeed, or Hugging Face's integration that writes these
// configs, accepts it there).
enum class AutoValue { Rejected, Accepted };

// The names of one setting: its key first, then any aliases.
class KeyNames {
 public:
  KeyNames(const char* key) : names_{key} {}  // NOLINT: a plain key reads best at call sites
  KeyNames(std::initializer_list<std::string_view> names) : names_(names) {}
  const std::vector<std::string_view>& all() const { return names_; }
  std::string_view primary() const { return names_.front(); }

 private:
  std::vector<std::string_view> names_;
};

// Inclusive bounds for integers.
struct IntRange {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
};
inline IntRange atLeast(std::int64_t min) {
  return {min, std::numeric_limits<std::int64_t>::max()};
}
inline IntRange between(std::int64_t min, std::int64_t max) { return {min, max}; }

// Bounds for reals; `openMin` makes the lower bound exclusive ("> 0").
struct RealRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool openMin = false;
};
inline RealRange nonNegative() { return {0.0, std::numeric_limits<double>::infinity(), false}; }
inline RealRange positive() { return {0.0, std::numeric_limits<double>::infinity(), true}; }
inline RealRange unitInterval() { return {0.0, 1.0, false}; }

class ConfigSection {
 public:
  // `object` may be null: the section is absent and every read returns its default.
  // `path` is the section's JSON path ("" for the top level).
  ConfigSection(const nlohmann::json* object, std::string path, ConfigLog& log);

  bool present() const { return object_ != nullptr; }
  const std::string& path() const { return path_; }
  bool has(std::string_view key) const;
  // True when any of the names is given as "auto".
  bool isAuto(const KeyNames& key) const;
  // The path of `key` in this section, for messages.
  std::string pathOf(std::string_view key) const;

  std::int64_t readInt(const KeyNames& key, std::int64_t def, IntRange range,
                       AutoValue autoValue = AutoValue::Rejected);
  // nullopt when absent or "auto"; for values whose default depends on other values.
  std::optional<std::int64_t> readOptionalInt(const KeyNames& key, IntRange range,
                                              AutoValue autoValue = AutoValue::Rejected);
  double readDouble(const KeyNames& key, double def, RealRange range,
                    AutoValue autoValue = AutoValue::Rejected);
  bool readBool(const KeyNames& key, bool def, AutoValue autoValue = AutoValue::Rejected);
  std::optional<bool> readOptionalBool(const KeyNames& key,
                                       AutoValue autoValue = AutoValue::Rejected);
  // A byte count: a number or a string such as "1M", "64K", "2e8" (binary suffixes).
  std::uint64_t readBytes(const KeyNames& key, std::uint64_t def, IntRange range);
  std::string readString(const KeyNames& key, const std::string& def);
  // One of `choices` (compared without case); returns the index into `choices`.
  std::size_t readChoice(const KeyNames& key, std::size_t def,
                         const std::vector<std::string_view>& choices);
  template <class E>
  E readEnum(const KeyNames& key, E def,
             std::initializer_list<std::pair<std::string_view, E>> choices) {
    std::vector<std::string_view> names;
    std::size_t defIndex = 0;
    for (const auto& [name, value] : choices) {
      if (value == def) defIndex = names.size();
      names.push_back(name);
    }
    return (choices.begin() + readChoice(key, defIndex, names))->second;
  }
  // Directory paths: one string or a non-empty list of non-empty strings; empty when absent or
  // null.
  std::vector<std::string> readPaths(const KeyNames& key);
  // A fixed-length list of reals ("betas": [0.9, 0.999]).
  std::vector<double> readReals(const KeyNames& key, std::vector<double> def, RealRange range,
                                AutoValue autoValue = AutoValue::Rejected);

  // A nested object; absent or null gives an absent section.
  ConfigSection section(std::string_view key);

  // Keys DeepSpeed defines that ZRT accepts without acting on them (any value); the ones present
  // are recorded in the log so the start-up printout can list them.
  void ignore(std::initializer_list<std::string_view> keys);
  // Records that these keys, already read, are not acted on by ZRT yet.
  void noteNotActedOn(std::initializer_list<std::string_view> keys);
  // Records how a value was resolved, for the start-up printout.
  void note(const std::string& text);

  // Throws ConfigError for the first key no reader asked for, suggesting the nearest known key.
  void finish();

  [[noreturn]] void fail(std::string_view key, const std::string& problem) const;

 private:
  // The names under which the setting is given, with their values; registers every name as
  // known. readAs() converts each and throws when two aliases disagree.
  struct Given {
    std::string_view name;
    const nlohmann::json* value;
  };
  std::vector<Given> lookup(const KeyNames& key);
  template <class T, class Convert>
  std::optional<T> readAs(const KeyNames& key, AutoValue autoValue, Convert convert);
  void noteIfAuto(const KeyNames& key, const std::string& resolved);

  const nlohmann::json* object_;
  std::string path_;
  ConfigLog* log_;
  std::vector<std::string> known_;
};

}  // namespace zrt
