// A gtest fixture for tests against real etcd: one EtcdTestCluster for the
// whole suite (started in SetUpTestSuite, skipped where /usr/bin/etcd is
// missing), a client per test, and a key prefix of the test's own
// (/sliced/<test name>/), so the suite's tests never see each other's keys.
#ifndef SLICED_TESTS_STORAGE_ETCD_FIXTURE_H_
#define SLICED_TESTS_STORAGE_ETCD_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/etcd/etcd_client.h"
#include "storage/etcd/etcd_store.h"
#include "storage/store.h"
#include "tests/storage/etcd_test_cluster.h"

namespace sliced::storage {

class EtcdFixture : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!EtcdTestCluster::Unavailable().empty()) return;
    auto started = EtcdTestCluster::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = std::move(started).value().release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    const std::string why = EtcdTestCluster::Unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    ASSERT_NE(cluster_, nullptr) << "the suite's etcd cluster did not start";
    auto client = EtcdClient::Create({.endpoints = cluster_->endpoints()});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *client;
    prefix_ = absl::StrCat(
        "/sliced/",
        testing::UnitTest::GetInstance()->current_test_info()->name(), "/");
  }

  // The etcd store under this test's prefix; null (and a failure) if it
  // does not open.
  std::unique_ptr<Store> Open(EtcdStoreOptions options = {}) {
    options.prefix = prefix_;
    auto store = OpenEtcdStore(client_, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // Puts `key` (a whole key) and returns the revision of the put; 0 (and a
  // failure) if it fails.
  int64_t Put(const std::string& key) {
    etcdserverpb::TxnRequest txn;
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value("x");
    auto done = client_->Txn(txn);
    EXPECT_TRUE(done.ok()) << done.status();
    return done.ok() ? done->header().revision() : 0;
  }
  void Delete(const std::string& key) {
    etcdserverpb::TxnRequest txn;
    txn.add_success()->mutable_request_delete_range()->set_key(key);
    auto done = client_->Txn(txn);
    ASSERT_TRUE(done.ok()) << done.status();
  }

  inline static EtcdTestCluster* cluster_ = nullptr;
  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
};

}  // namespace sliced::storage

#endif  // SLICED_TESTS_STORAGE_ETCD_FIXTURE_H_
