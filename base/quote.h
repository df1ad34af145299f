// Quote(): an input value as error text, bounded. Every error that echoes a
// value a client sent (a label, a node id, a selector) goes through it, so a
// 5 MB label value is rejected with a message of about a hundred bytes:
//
//   Quote("v6e")               -> "v6e"
//   Quote("a b", '\'')         -> 'a b'
//   Quote(<5 MB of 'p'>)       -> "pppp…p"... (5242880 bytes)  (64 p's)
//
// Pure functions; thread-safe. Header-only, shared by every layer.
#ifndef SLICED_BASE_QUOTE_H_
#define SLICED_BASE_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sliced {

// How many bytes of a value an error message quotes.
inline constexpr size_t kMaxQuotedBytes = 64;

// The first `max` bytes of `value` at most, cut back to a whole UTF-8
// character (`value` itself when it is no longer).
inline absl::string_view CutUtf8(absl::string_view value, size_t max) {
  if (value.size() <= max) return value;
  size_t cut = max;
  // Don't split a multi-byte character: back up over continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return value.substr(0, cut);
}

// Returns `value` between two `quote` characters when it has at most
// kMaxQuotedBytes bytes; otherwise its first kMaxQuotedBytes bytes (cut back
// to a whole UTF-8 character) between quotes, then "... (N bytes)" with N the
// value's full size.
inline std::string Quote(absl::string_view value, char quote = '"') {
  const absl::string_view q(&quote, 1);
  if (value.size() <= kMaxQuotedBytes) return absl::StrCat(q, value, q);
  return absl::StrCat(q, CutUtf8(value, kMaxQuotedBytes), q, "... (",
                      value.size(), " bytes)");
}

}  // namespace sliced

#endif  // SLICED_BASE_QUOTE_H_
