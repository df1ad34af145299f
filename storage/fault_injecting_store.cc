#include "storage/fault_injecting_store.h"

#include "absl/strings/str_cat.h"

namespace sliced::storage {

absl::StatusOr<StoredState> FaultInjectingStore::Load() {
  {
    absl::MutexLock lock(&mu_);
    ++loads_;
    if (deposed_) return DeposedError("injected: deposed");
    if (fail_loads_ > 0) {
      --fail_loads_;
      return absl::UnavailableError("injected load failure");
    }
  }
  return inner_->Load();
}

namespace {

absl::Status UnitTooLarge(size_t writes, size_t max) {
  return absl::FailedPreconditionError(
      absl::StrCat("injected: one operation writes ", writes,
                   " keys, above the limit of ", max));
}

}  // namespace

absl::Status FaultInjectingStore::CheckUnit(const Mutation& unit) const {
  {
    absl::MutexLock lock(&mu_);
    if (max_unit_writes_ > 0 && unit.size() > max_unit_writes_) {
      return UnitTooLarge(unit.size(), max_unit_writes_);
    }
  }
  return inner_->CheckUnit(unit);
}

void FaultInjectingStore::LimitUnitWrites(size_t max) {
  absl::MutexLock lock(&mu_);
  max_unit_writes_ = max;
}

absl::Status FaultInjectingStore::Commit(const Mutation& mutation) {
  absl::Duration delay;
  bool fail_write = false, fail_sync = false;
  {
    absl::MutexLock lock(&mu_);
    ++commits_;
    if (deposed_) return DeposedError("injected: deposed");
    if (max_unit_writes_ > 0) {
      size_t begin = 0;
      for (size_t end : mutation.UnitEnds()) {
        if (end - begin > max_unit_writes_) {
          return UnitTooLarge(end - begin, max_unit_writes_);
        }
        begin = end;
      }
    }
    delay = delay_;
    if (fail_writes_ > 0) {
      --fail_writes_;
      fail_write = true;
    } else if (fail_syncs_ > 0) {
      --fail_syncs_;
      fail_sync = true;
    }
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  if (fail_write) return absl::UnavailableError("injected write failure");
  absl::Status applied = inner_->Commit(mutation);
  if (!applied.ok()) return applied;
  if (fail_sync)
    return absl::UnavailableError("injected sync failure (data written)");
  return absl::OkStatus();
}

void FaultInjectingStore::FailWrites(int count) {
  absl::MutexLock lock(&mu_);
  fail_writes_ = count;
}
void FaultInjectingStore::FailSyncs(int count) {
  absl::MutexLock lock(&mu_);
  fail_syncs_ = count;
}
void FaultInjectingStore::FailLoads(int count) {
  absl::MutexLock lock(&mu_);
  fail_loads_ = count;
}
void FaultInjectingStore::SetCommitDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}
bool FaultInjectingStore::shared() const {
  absl::MutexLock lock(&mu_);
  return shared_ || inner_->shared();
}
absl::Status FaultInjectingStore::Confirm() {
  {
    absl::MutexLock lock(&mu_);
    if (deposed_) return DeposedError("injected: deposed");
    if (fail_confirms_ > 0) {
      --fail_confirms_;
      return absl::UnavailableError("injected confirm failure");
    }
  }
  return inner_->Confirm();
}
void FaultInjectingStore::FailConfirms(int count) {
  absl::MutexLock lock(&mu_);
  fail_confirms_ = count;
}
void FaultInjectingStore::SetShared() {
  absl::MutexLock lock(&mu_);
  shared_ = true;
}
void FaultInjectingStore::Depose() {
  absl::MutexLock lock(&mu_);
  deposed_ = true;
}
int64_t FaultInjectingStore::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

int64_t FaultInjectingStore::loads() const {
  absl::MutexLock lock(&mu_);
  return loads_;
}

}  // namespace sliced::storage
