#include "core/config/config_section.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/config/config_error.h"
#include "core/config/key_suggestion.h"
#include "core/units.h"

namespace zrt {
namespace {

constexpr double kInt64Limit = 9223372036854775808.0;  // 2^63

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "string \"abc\"", "number 2.5", "an object"... for "expected X, got Y" messages.
std::string describeValue(const nlohmann::json& v) {
  std::string dump = v.dump();
  if (dump.size() > 60) dump = dump.substr(0, 57) + "...";
  switch (v.type()) {
    case nlohmann::json::value_t::string:
      return "string " + dump;
    case nlohmann::json::value_t::boolean:
      return "boolean " + dump;
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "a list " + dump;
    case nlohmann::json::value_t::null:
      return "null";
    default:
      return "number " + dump;
  }
}

bool isAutoValue(const nlohmann::json& v) {
  return v.is_string() && v.get<std::string>() == "auto";
}

// A whole string holding a number ("2e8", "0.5"); nullopt for anything else.
std::optional<double> numberInString(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

std::string rangeText(IntRange r) {
  if (r.max == std::numeric_limits<std::int64_t>::max()) return detail::cat("must be >= ", r.min);
  return detail::cat("must be between ", r.min, " and ", r.max);
}

std::string rangeText(RealRange r) {
  if (std::isinf(r.max)) return detail::cat("must be ", r.openMin ? "> " : ">= ", r.min);
  return detail::cat("must be ", r.openMin ? "above " : "between ", r.min,
                     r.openMin ? " and at most " : " and ", r.max);
}

template <class Range>
std::string outOfRange(const nlohmann::json& v, Range range) {
  return detail::cat("value ", v.dump(), " is out of range: ", rangeText(range));
}

// A value above 2^63 - 1 for a key without an upper bound: "must be >= 1" alone would read as if
// the value were too small, so the bound that applies is named.
std::string tooLarge(const nlohmann::json& v, IntRange r) {
  if (r.max != std::numeric_limits<std::int64_t>::max()) return outOfRange(v, r);
  return detail::cat("value ", v.dump(), " is out of range: must be between ", r.min, " and ", r.max);
}

bool inRange(double v, RealRange r) { return (r.openMin ? v > r.min : v >= r.min) && v <= r.max; }

}  // namespace

ConfigSection::ConfigSection(const nlohmann::json* object, std::string path, ConfigLog& log)
    : object_(object), path_(std::move(path)), log_(&log) {}

bool ConfigSection::has(std::string_view key) const { return object_ && object_->contains(key); }

bool ConfigSection::isAuto(const KeyNames& key) const {
  if (!object_) return false;
  for (auto name : key.all()) {
    auto it = object_->find(name);
    if (it != object_->end() && isAutoValue(*it)) return true;
  }
  return false;
}

std::string ConfigSection::pathOf(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

void ConfigSection::fail(std::string_view key, const std::string& problem) const {
  throw ConfigError(log_->source, key.empty() ? path_ : pathOf(key), problem);
}

std::vector<ConfigSection::Given> ConfigSection::lookup(const KeyNames& key) {
  std::vector<Given> given;
  for (auto name : key.all()) {
    known_.emplace_back(name);
    if (!object_) continue;
    auto it = object_->find(name);
    if (it != object_->end()) given.push_back({name, &*it});
  }
  return given;
}

template <class T, class Convert>
std::optional<T> ConfigSection::readAs(const KeyNames& key, AutoValue autoValue, Convert convert) {
  std::vector<Given> given = lookup(key);
  std::optional<T> result;
  for (std::size_t i = 0; i < given.size(); ++i) {
    const auto& [name, value] = given[i];
    std::optional<T> v;
    if (isAutoValue(*value)) {
      if (autoValue == AutoValue::Rejected)
        fail(name, "\"auto\" is not accepted for this key; give a value");
    } else {
      v = convert(name, *value);
    }
    // Aliases name one setting; two that disagree leave no right answer.
    if (i > 0 && v != result) {
      fail(name, detail::cat("conflicts with ", pathOf(given[0].name), " = ",
                             given[0].value->dump(), " (given here as ", value->dump(),
                             "); they are names of one setting, give one"));
    }
    result = v;
  }
  return result;
}

void ConfigSection::noteIfAuto(const KeyNames& key, const std::string& resolved) {
  if (isAuto(key))
    note(detail::cat(pathOf(key.primary()), ": \"auto\" -> ", resolved,
                     " (the default; nothing supplied a value)"));
}

void ConfigSection::note(const std::string& text) { log_->notes.push_back(text); }

std::optional<std::int64_t> ConfigSection::readOptionalInt(const KeyNames& key, IntRange range,
                                                           AutoValue autoValue) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> std::int64_t {
    auto checked = [&](std::int64_t i) {
      if (i < range.min || i > range.max) fail(name, outOfRange(v, range));
      return i;
    };
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(name, tooLarge(v, range));
      return checked(v.get<std::int64_t>());
    }
    if (v.is_number_integer()) return checked(v.get<std::int64_t>());
    double d = 0;
    if (v.is_number_float()) {
      d = v.get<double>();
    } else if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      std::int64_t exact = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), exact);
      if (ec == std::errc() && end == s.data() + s.size()) return checked(exact);
      auto parsed = numberInString(s);
      if (!parsed) fail(name, "expected an integer, got " + describeValue(v));
      d = *parsed;
    } else {
      fail(name, "expected an integer, got " + describeValue(v));
    }
    if (!std::isfinite(d)) fail(name, "expected an integer, got " + describeValue(v));
    if (d != std::floor(d))
      fail(name, "expected a whole number, got " + describeValue(v) +
                     " (this key counts things; it takes no fraction)");
    if (d >= kInt64Limit) fail(name, tooLarge(v, range));
    if (d < -kInt64Limit || d >= kInt64Limit || d < static_cast<double>(range.min) ||
        d > static_cast<double>(range.max))
      fail(name, outOfRange(v, range));
    return static_cast<std::int64_t>(d);
  };
  return readAs<std::int64_t>(key, autoValue, convert);
}

std::int64_t ConfigSection::readInt(const KeyNames& key, std::int64_t def, IntRange range,
                                    AutoValue autoValue) {
  auto v = readOptionalInt(key, range, autoValue);
  if (v) return *v;
  noteIfAuto(key, detail::cat(def));
  return def;
}

double ConfigSection::readDouble(const KeyNames& key, double def, RealRange range,
                                 AutoValue autoValue) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> double {
    double d = 0;
    if (v.is_number()) {
      d = v.get<double>();
    } else if (v.is_string()) {
      auto parsed = numberInString(v.get<std::string>());
      if (!parsed) fail(name, "expected a number, got " + describeValue(v));
      d = *parsed;
    } else {
      fail(name, "expected a number, got " + describeValue(v));
    }
    if (!std::isfinite(d)) fail(name, "expected a finite number, got " + describeValue(v));
    if (!inRange(d, range)) fail(name, outOfRange(v, range));
    return d;
  };
  auto v = readAs<double>(key, autoValue, convert);
  if (v) return *v;
  noteIfAuto(key, detail::cat(def));
  return def;
}

std::optional<bool> ConfigSection::readOptionalBool(const KeyNames& key, AutoValue autoValue) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> bool {
    if (v.is_boolean()) return v.get<bool>();
    // DeepSpeed's NVMe tuner prints "true"/"false" as strings; take them at their word.
    if (v.is_string()) {
      std::string s = lower(v.get<std::string>());
      if (s == "true") return true;
      if (s == "false") return false;
    }
    fail(name, "expected true or false, got " + describeValue(v));
  };
  return readAs<bool>(key, autoValue, convert);
}

bool ConfigSection::readBool(const KeyNames& key, bool def, AutoValue autoValue) {
  auto v = readOptionalBool(key, autoValue);
  if (v) return *v;
  noteIfAuto(key, def ? "true" : "false");
  return def;
}

std::uint64_t ConfigSection::readBytes(const KeyNames& key, std::uint64_t def, IntRange range) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> std::uint64_t {
    auto bad = [&]() {
      fail(name,
           "expected a byte size such as 1048576, \"1M\" or \"64K\", got " + describeValue(v));
    };
    std::uint64_t bytes = 0;
    if (v.is_number_unsigned()) {
      bytes = v.get<std::uint64_t>();
    } else if (v.is_number_integer()) {
      if (v.get<std::int64_t>() < 0) fail(name, outOfRange(v, range));
      bytes = static_cast<std::uint64_t>(v.get<std::int64_t>());
    } else if (v.is_number_float()) {
      double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d)) bad();
      if (d < 0 || d >= 1.8e19) fail(name, outOfRange(v, range));
      bytes = static_cast<std::uint64_t>(d);
    } else if (v.is_string()) {
      try {
        bytes = parseBytes(v.get<std::string>(), pathOf(name));
      } catch (const InvalidArgument&) {
        bad();
      }
    } else {
      bad();
    }
    if (bytes < static_cast<std::uint64_t>(std::max<std::int64_t>(range.min, 0)) ||
        bytes > static_cast<std::uint64_t>(range.max))
      fail(name, detail::cat("value ", v.dump(), " (", bytes,
                             " bytes) is out of range: ", rangeText(range)));
    return bytes;
  };
  return readAs<std::uint64_t>(key, AutoValue::Rejected, convert).value_or(def);
}

std::string ConfigSection::readString(const KeyNames& key, const std::string& def) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> std::string {
    if (!v.is_string()) fail(name, "expected a string, got " + describeValue(v));
    return v.get<std::string>();
  };
  return readAs<std::string>(key, AutoValue::Rejected, convert).value_or(def);
}

std::size_t ConfigSection::readChoice(const KeyNames& key, std::size_t def,
                                      const std::vector<std::string_view>& choices) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> std::size_t {
    std::string list;
    std::vector<std::string> names;
    for (auto c : choices) {
      list += (list.empty() ? "" : ", ") + std::string(c);
      names.emplace_back(c);
    }
    if (!v.is_string()) fail(name, "expected one of " + list + ", got " + describeValue(v));
    std::string given = lower(v.get<std::string>());
    for (std::size_t i = 0; i < choices.size(); ++i)
      if (lower(choices[i]) == given) return i;
    std::string near = nearestKey(v.get<std::string>(), names);
    fail(name, "unknown value " + v.dump() +
                   (near.empty() ? "" : "; did you mean \"" + near + "\"?") +
                   " (accepted: " + list + ")");
  };
  return readAs<std::size_t>(key, AutoValue::Rejected, convert).value_or(def);
}

std::vector<std::string> ConfigSection::readPaths(const KeyNames& key) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> std::vector<std::string> {
    auto expect = [&]() {
      fail(name, "expected a directory or a list of directories (one per drive), got " +
                     describeValue(v));
    };
    std::vector<std::string> paths;
    if (v.is_null()) return paths;
    if (v.is_string()) {
      paths.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      if (v.empty()) fail(name, "the list of directories is empty; give at least one");
      for (const auto& item : v) {
        if (!item.is_string()) expect();
        paths.push_back(item.get<std::string>());
      }
    } else {
      expect();
    }
    for (const auto& p : paths)
      if (p.empty()) fail(name, "a directory name is empty");
    return paths;
  };
  return readAs<std::vector<std::string>>(key, AutoValue::Rejected, convert)
      .value_or(std::vector<std::string>{});
}

std::vector<double> ConfigSection::readReals(const KeyNames& key, std::vector<double> def,
                                             RealRange range, AutoValue autoValue) {
  auto convert = [&](std::string_view name, const nlohmann::json& v) -> std::vector<double> {
    if (!v.is_array() || v.size() != def.size())
      fail(name,
           detail::cat("expected a list of ", def.size(), " numbers, got ", describeValue(v)));
    std::vector<double> out;
    for (const auto& item : v) {
      std::optional<double> d;
      if (item.is_number())
        d = item.get<double>();
      else if (item.is_string())
        d = numberInString(item.get<std::string>());
      if (!d || !std::isfinite(*d))
        fail(name, "expected numbers in the list, got " + describeValue(item));
      if (!inRange(*d, range)) fail(name, outOfRange(item, range));
      out.push_back(*d);
    }
    return out;
  };
  auto v = readAs<std::vector<double>>(key, autoValue, convert);
  if (v) return *v;
  std::string text;
  for (double d : def) text += (text.empty() ? "[" : ", ") + detail::cat(d);
  noteIfAuto(key, text + "]");
  return def;
}

ConfigSection ConfigSection::section(std::string_view key) {
  known_.emplace_back(key);
  if (!object_) return ConfigSection(nullptr, pathOf(key), *log_);
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return ConfigSection(nullptr, pathOf(key), *log_);
  if (!it->is_object()) fail(key, "expected an object ({...}), got " + describeValue(*it));
  return ConfigSection(&*it, pathOf(key), *log_);
}

void ConfigSection::ignore(std::initializer_list<std::string_view> keys) {
  for (auto key : keys) {
    known_.emplace_back(key);
    if (has(key)) log_->ignored.push_back(pathOf(key));
  }
}

void ConfigSection::noteNotActedOn(std::initializer_list<std::string_view> keys) {
  for (auto key : keys)
    if (has(key)) log_->ignored.push_back(pathOf(key));
}

void ConfigSection::finish() {
  if (!object_) return;
  for (const auto& [key, value] : object_->items()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string near = nearestKey(key, known_);
    std::string problem = "unknown key";
    if (!near.empty()) {
      problem += "; did you mean '" + near + "'?";
    } else if (known_.size() <= 30) {
      std::vector<std::string> sorted = known_;
      std::sort(sorted.begin(), sorted.end());
      sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
      std::string list;
      for (const auto& k : sorted) list += (list.empty() ? "" : ", ") + k;
      problem += " (keys accepted here: " + list + ")";
    }
    fail(key, problem);
  }
}

}  // namespace zrt
