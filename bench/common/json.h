// A minimal streaming JSON writer for benchmark output (no dependency).
//
//   JsonWriter w;
//   w.BeginObject().Key("ops_per_s").Number(1234.5).EndObject();
//   std::string text = w.str();
//
// Not thread-safe. Keys and values are written in call order, so output is
// as deterministic as the caller.
#ifndef SLICED_BENCH_COMMON_JSON_H_
#define SLICED_BENCH_COMMON_JSON_H_

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace sliced::bench {

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  JsonWriter& Key(absl::string_view key) {
    Separate();
    AppendQuoted(key);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& String(absl::string_view value) {
    Separate();
    AppendQuoted(value);
    return *this;
  }
  // Non-finite numbers are written as null.
  JsonWriter& Number(double value) {
    Separate();
    if (!std::isfinite(value)) {
      out_ += "null";
    } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
      absl::StrAppendFormat(&out_, "%.0f", value);
    } else {
      absl::StrAppendFormat(&out_, "%.6g", value);
    }
    return *this;
  }
  JsonWriter& Bool(bool value) {
    Separate();
    out_ += value ? "true" : "false";
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  JsonWriter& Open(char c) {
    Separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void AppendQuoted(absl::string_view s) {
    out_ += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        absl::StrAppendFormat(&out_, "\\u%04x", c);
      } else {
        out_ += c;
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace sliced::bench

#endif  // SLICED_BENCH_COMMON_JSON_H_
