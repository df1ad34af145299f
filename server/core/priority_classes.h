// Named priority classes (issue 18, item 1): `production`, `batch`,
// `best-effort` mapped to the integer priority a placement group carries,
// as Kubernetes' PriorityClass maps a name to a value at admission.
//
// The table comes from the daemon's flags (--priority_classes,
// --default_priority_class); a request names a class, and the group stores
// both the name and the value resolved at create. Whether a class may be
// preempted is looked up when preempting, so an admin can change it.
//
// Thread-safety: immutable after Parse(); share freely.
#ifndef SLICED_SERVER_CORE_PRIORITY_CLASSES_H_
#define SLICED_SERVER_CORE_PRIORITY_CLASSES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sliced::server {

struct PriorityClass {
  std::string name;
  int32_t value = 0;
  // False: groups of this class are never chosen as victims.
  bool preemptible = true;

  friend bool operator==(const PriorityClass&, const PriorityClass&) = default;
};

class PriorityClasses {
 public:
  // The built-in table, and its default class: a request that names no
  // class and no priority is best-effort, priority 0 as before classes.
  static constexpr char kDefaultSpec[] =
      "production=1000,batch=100,best-effort=0";
  static constexpr char kDefaultClass[] = "best-effort";

  // Parses "name=value[:non-preemptible],..." (names as Kubernetes object
  // names: lower-case letters, digits and '-', at most 63 characters;
  // values distinct). `default_class` is "" or one of the names.
  // InvalidArgument names the flag and the rule.
  static absl::StatusOr<PriorityClasses> Parse(absl::string_view spec,
                                               absl::string_view default_class);

  // The built-in table (kDefaultSpec, kDefaultClass).
  PriorityClasses();

  // Resolves a request's class and integer priority in place:
  //  - a class: it must exist; `priority` must be 0 or its value; both
  //    become the class's;
  //  - no class and priority 0: the default class, if there is one;
  //  - no class and another priority: kept as it is (no class).
  // InvalidArgument (naming `priority_class` or `priority`) changes
  // nothing.
  absl::Status Resolve(std::string& priority_class, int32_t& priority) const;

  // Nullptr when unknown.
  const PriorityClass* Find(absl::string_view name) const;
  // Highest value first.
  const std::vector<PriorityClass>& classes() const { return classes_; }
  const std::string& default_class() const { return default_; }
  // "production (1000, non-preemptible), batch (100), best-effort (0)".
  std::string Describe() const;

 private:
  struct NoClasses {};
  explicit PriorityClasses(NoClasses) {}

  std::vector<PriorityClass> classes_;
  std::string default_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_PRIORITY_CLASSES_H_
