// The daemon's HTTP port (--metrics_listen): Prometheus text on /metrics, the
// web view's static page on /ui, and its read-only JSON API on /api/v1/...
// (server/api/web_api.h). One cpp-httplib server (Debian's
// libcpp-httplib-dev: it parses HTTP and speaks TLS through OpenSSL), in
// place of prometheus::Exposer, which cannot serve other paths. (Debian's
// CivetWeb, under the Exposer, loads OpenSSL 1.1 symbols at run time and
// crashes on the first HTTPS request with OpenSSL 3.)
//
//  - /metrics: the text prometheus::Exposer served: the exposer_* families,
//    then every collectable's, in prometheus-cpp's text format; compressed
//    when the client accepts it. Open, as before.
//  - /ui (and /ui/<asset>): the page, compiled into the binary; open (it
//    holds no data).
//  - /api/v1/...: GET only (anything else is 405: nothing changes through
//    this port). With tokens configured, the caller needs any role's token
//    (a read, as gRPC's) as `Authorization: Bearer <token>` or the cookie
//    `sliced_token` (read when no `Authorization: Bearer` header is): 401
//    without one or with an unknown one. Without tokens, only loopback
//    peers that name a loopback host (`Host`: localhost, 127.x.x.x or
//    [::1], so that a page whose name was re-pointed at 127.0.0.1 in a
//    browser can't read it: DNS rebinding) are answered (403 otherwise), as
//    the gRPC port only listens on loopback without them. After Refuse()
//    (a leader stepping down), 503 with the refusal.
//  - TLS: when `tls_cert`/`tls_key` are set, the port speaks HTTPS only,
//    with the daemon's certificate; `tls_client_ca` requires client
//    certificates, as on gRPC.
//
// Thread-safe; handlers run on cpp-httplib's worker threads.
#ifndef SLICED_SERVER_API_HTTP_SERVER_H_
#define SLICED_SERVER_API_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "server/api/auth.h"
#include "server/api/web_api.h"

namespace sliced::server::api {

class HttpServer {
 public:
  struct Options {
    // host:port; port 0 picks a free one.
    std::string listen;
    // PEM files; both empty for plain HTTP.
    std::string tls_cert;
    std::string tls_key;
    std::string tls_client_ca;
    // Null: no tokens (loopback peers only for /api/v1).
    const Authenticator* auth = nullptr;
  };

  // Binds and starts serving. InvalidArgument when `listen` is not
  // host:port; Unavailable when it can't be bound (in use) or the TLS files
  // can't be loaded.
  // `api` may be null (a standby's port: /metrics and /ui only; /api/v1
  // answers 503).
  // REQUIRES: `api`, `options.auth` and the collectables outlive the
  // server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const Options& options,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      const WebApi* api);

  // Stops accepting, finishes the requests in flight.
  ~HttpServer();

  int port() const { return port_; }

  // From now on /api/v1 answers `refusal` (a leader stepping down: its
  // data is no longer current). /metrics and /ui stay.
  void Refuse(const absl::Status& refusal);

  struct Impl;

 private:
  HttpServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  const int port_;
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_HTTP_SERVER_H_
