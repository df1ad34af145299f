// A Store wrapper that injects faults, for tests (leveldb's ErrorEnv):
// failed writes (nothing applied), failed syncs (applied, reported failed —
// what a real disk can do), failed loads, and slow commits.
//
// Thread-safe: the controls may be set from a test thread while the
// coordinator commits.
#ifndef SLICED_STORAGE_FAULT_INJECTING_STORE_H_
#define SLICED_STORAGE_FAULT_INJECTING_STORE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/store.h"

namespace sliced::storage {

class FaultInjectingStore : public Store {
 public:
  // REQUIRES: `inner` outlives this store.
  explicit FaultInjectingStore(Store* inner) : inner_(inner) {}

  absl::StatusOr<StoredState> Load() override;
  absl::Status Commit(const Mutation& mutation) override;
  absl::Status CheckUnit(const Mutation& unit) const override;
  // The inner store's answers, unless SetShared() / Depose() (below) say
  // otherwise.
  bool shared() const override;
  absl::Status Confirm() override;

  // The next `count` commits fail with Unavailable and apply nothing.
  void FailWrites(int count);
  // The next `count` commits are applied to the inner store but answer
  // Unavailable, as a write whose fsync failed.
  void FailSyncs(int count);
  // The next `count` loads fail with Unavailable.
  void FailLoads(int count);
  // Every commit sleeps this long first (default zero).
  void SetCommitDelay(absl::Duration delay);
  // Acts as a store other daemons write (etcd under an election), whose
  // fence holds until Depose(): from then on every commit, Confirm() and
  // load fails with a DeposedError, as another daemon leads.
  void SetShared();
  void Depose();
  // The next `count` Confirm()s fail Unavailable (etcd out of reach for a
  // moment), the fence holding.
  void FailConfirms(int count);

  // Units (one op's writes) of more than `max` writes are refused, as
  // etcd's Txn limits refuse them: by CheckUnit, and by a Commit that holds
  // one (FailedPrecondition, nothing applied). 0: no limit (the default).
  void LimitUnitWrites(size_t max);

  int64_t commits() const;
  int64_t loads() const;

 private:
  Store* const inner_;
  mutable absl::Mutex mu_;
  int fail_writes_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_loads_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_);
  bool shared_ ABSL_GUARDED_BY(mu_) = false;
  bool deposed_ ABSL_GUARDED_BY(mu_) = false;
  int fail_confirms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loads_ ABSL_GUARDED_BY(mu_) = 0;
  size_t max_unit_writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_FAULT_INJECTING_STORE_H_
