#include "server/api/http_server.h"

#include <netdb.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "civetweb.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/summary.h"
#include "prometheus/text_serializer.h"
#include "server/api/web_assets.h"

namespace sliced::server::api {
namespace {

// Host and port of a listen address ("127.0.0.1:0", "[::1]:9464").
std::pair<std::string, std::string> SplitListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host =
      colon == std::string::npos ? listen : listen.substr(0, colon);
  std::string port = colon == std::string::npos ? "" : listen.substr(colon + 1);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return {host, port};
}

bool IsLoopbackPeer(absl::string_view addr) {
  return absl::StartsWith(addr, "127.") || addr == "::1" ||
         absl::StartsWith(addr, "::ffff:127.");
}

// Connects to host:port and hangs up at once; errors are ignored.
void Poke(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) !=
      0) {
    return;
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

// gzip (RFC 1952) of `in`; empty on failure.
std::string Gzip(const std::string& in) {
  z_stream z = {};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return "";
  }
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : "";
}

absl::string_view ContentType(absl::string_view name) {
  if (absl::EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(name, ".css")) return "text/css; charset=utf-8";
  if (absl::EndsWith(name, ".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

// Writes a whole response.
void Reply(mg_connection* conn, int status, absl::string_view reason,
           absl::string_view content_type, absl::string_view body,
           absl::string_view extra_headers = "") {
  std::string head = absl::StrCat(
      "HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(),
      "\r\nX-Content-Type-Options: nosniff\r\n", extra_headers, "\r\n");
  mg_write(conn, head.data(), head.size());
  mg_write(conn, body.data(), body.size());
}

absl::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

// True for a GET; otherwise answers 405 and returns false.
bool IsGet(mg_connection* conn) {
  if (strcmp(mg_get_request_info(conn)->request_method, "GET") == 0) {
    return true;
  }
  Reply(conn, 405, Reason(405), "text/plain; charset=utf-8", "GET only\n",
        "Allow: GET\r\n");
  return false;
}

// The query parameters the API knows, decoded.
std::map<std::string, std::string> QueryParams(const char* query) {
  std::map<std::string, std::string> out;
  if (query == nullptr) return out;
  const size_t len = strlen(query);
  char value[1024];
  for (const char* name :
       {"accelerator_type", "topology", "tier", "zone", "status", "page_size",
        "page_token", "offset"}) {
    if (mg_get_var(query, len, name, value, sizeof(value)) >= 0) {
      out[name] = value;
    }
  }
  return out;
}

}  // namespace

struct HttpServer::Impl {
  Impl(const Options& o,
       std::vector<std::shared_ptr<prometheus::Collectable>> c,
       const WebApi* a)
      : options(o),
        collectables(std::move(c)),
        api(a),
        exposer_registry(std::make_shared<prometheus::Registry>()),
        bytes_transferred(prometheus::BuildCounter()
                              .Name("exposer_transferred_bytes_total")
                              .Help("Transferred bytes to metrics services")
                              .Register(*exposer_registry)
                              .Add({})),
        scrapes(prometheus::BuildCounter()
                    .Name("exposer_scrapes_total")
                    .Help("Number of times metrics were scraped")
                    .Register(*exposer_registry)
                    .Add({})),
        latencies(
            prometheus::BuildSummary()
                .Name("exposer_request_latencies")
                .Help("Latencies of serving scrape requests, in microseconds")
                .Register(*exposer_registry)
                .Add({}, prometheus::Summary::Quantiles{
                             {0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}})) {
    collectables.insert(collectables.begin(), exposer_registry);
  }

  int Metrics(mg_connection* conn);
  int Ui(mg_connection* conn);
  int Api(mg_connection* conn);

  const Options options;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  const WebApi* const api;
  // The three series prometheus::Exposer served about itself.
  std::shared_ptr<prometheus::Registry> exposer_registry;
  prometheus::Counter& bytes_transferred;
  prometheus::Counter& scrapes;
  prometheus::Summary& latencies;

  mg_context* context = nullptr;
  int port = 0;
  // What CivetWeb logged while starting (why a start failed).
  absl::Mutex log_mu;
  std::string start_log ABSL_GUARDED_BY(log_mu);
};

int HttpServer::Impl::Metrics(mg_connection* conn) {
  if (!IsGet(conn)) return 405;
  const auto start = std::chrono::steady_clock::now();
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : collectables) {
    std::vector<prometheus::MetricFamily> more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  std::string body = prometheus::TextSerializer().Serialize(families);
  std::string encoding;
  const char* accept = mg_get_header(conn, "Accept-Encoding");
  if (accept != nullptr && absl::StrContains(accept, "gzip")) {
    std::string zipped = Gzip(body);
    if (!zipped.empty()) {
      body = std::move(zipped);
      encoding = "Content-Encoding: gzip\r\n";
    }
  }
  const std::string head = absl::StrCat(
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n",
      encoding, "Content-Length: ", body.size(), "\r\n\r\n");
  mg_write(conn, head.data(), head.size());
  mg_write(conn, body.data(), body.size());
  latencies.Observe(static_cast<double>(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - start)
          .count()));
  bytes_transferred.Increment(static_cast<double>(body.size()));
  scrapes.Increment();
  return 200;
}

int HttpServer::Impl::Ui(mg_connection* conn) {
  if (!IsGet(conn)) return 405;
  const mg_request_info* request = mg_get_request_info(conn);
  absl::string_view path = request->local_uri;
  absl::ConsumePrefix(&path, "/ui");
  absl::ConsumePrefix(&path, "/");
  const WebAsset* asset = FindWebAsset(path.empty() ? "index.html" : path);
  if (asset == nullptr) {
    Reply(conn, 404, Reason(404), "text/plain; charset=utf-8",
          "no such file\n");
    return 404;
  }
  Reply(conn, 200, "OK", ContentType(asset->name), asset->content,
        "Cache-Control: no-cache\r\n"
        "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
        "style-src 'self' 'unsafe-inline'; "
        "frame-ancestors 'none'\r\n"
        "X-Frame-Options: DENY\r\n");
  return 200;
}

int HttpServer::Impl::Api(mg_connection* conn) {
  const mg_request_info* request = mg_get_request_info(conn);
  WebReply reply;
  if (strcmp(request->request_method, "GET") != 0) {
    reply = ErrorReply(absl::UnimplementedError(
        "the web API is read-only: GET only (change things over gRPC)"));
    reply.http_status = 405;
  } else {
    absl::Status admitted = absl::OkStatus();
    if (options.auth == nullptr) {
      if (!IsLoopbackPeer(request->remote_addr)) {
        admitted = absl::PermissionDeniedError(
            "without --auth_tokens the web API answers loopback clients only");
      }
    } else {
      std::string token;
      const char* header = mg_get_header(conn, "Authorization");
      char cookie[1024];
      if (header != nullptr) {
        absl::string_view value = header;
        if (absl::ConsumePrefix(&value, "Bearer ")) {
          token = std::string(absl::StripAsciiWhitespace(value));
        }
      } else if (const char* cookies = mg_get_header(conn, "Cookie");
                 cookies != nullptr &&
                 mg_get_cookie(cookies, "sliced_token", cookie,
                               sizeof(cookie)) > 0) {
        token = cookie;
      }
      admitted =
          token.empty()
              ? absl::UnauthenticatedError(
                    "missing 'Authorization: Bearer <token>' header or "
                    "sliced_token cookie")
              : options.auth->CheckToken(token, Access::kRead);
    }
    if (admitted.ok()) {
      absl::string_view path = request->local_uri;
      absl::ConsumePrefix(&path, "/api/v1");
      absl::ConsumePrefix(&path, "/");
      reply = api->Get(path, QueryParams(request->query_string));
    } else {
      reply = ErrorReply(admitted);
    }
  }
  Reply(conn, reply.http_status, Reason(reply.http_status),
        "application/json", reply.body,
        reply.http_status == 405 ? "Allow: GET\r\nCache-Control: no-store\r\n"
                                 : "Cache-Control: no-store\r\n");
  return reply.http_status;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const Options& options,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    const WebApi* api) {
  auto impl = std::make_unique<Impl>(options, std::move(collectables), api);
  const bool tls = !options.tls_cert.empty();
  mg_init_library(tls ? MG_FEATURES_TLS : 0);
  const std::string ports = options.listen + (tls ? "s" : "");
  const std::string threads = std::to_string(options.threads);
  const char* civet_options[] = {"listening_ports",
                                 ports.c_str(),
                                 "num_threads",
                                 threads.c_str(),
                                 "enable_directory_listing",
                                 "no",
                                 nullptr};
  mg_callbacks callbacks = {};
  callbacks.log_message = [](const mg_connection* conn, const char* message) {
    auto* self = static_cast<Impl*>(
        mg_get_user_data(mg_get_context(conn)));
    if (self != nullptr) {
      absl::MutexLock lock(&self->log_mu);
      if (self->context == nullptr) {
        absl::StrAppend(&self->start_log, self->start_log.empty() ? "" : "; ",
                        message);
      }
    }
    return 1;  // CivetWeb prints nothing itself
  };
  if (tls) {
    // The daemon's own certificate and key files (CivetWeb wants both in
    // one), and mutual TLS as on gRPC. The context is ours: freed here
    // when CivetWeb lets go of it.
    callbacks.external_ssl_ctx = [](void** ssl_ctx, void* user_data) -> int {
      if (*ssl_ctx != nullptr) {
        SSL_CTX_free(static_cast<SSL_CTX*>(*ssl_ctx));
        return 1;
      }
      const Options& o = static_cast<Impl*>(user_data)->options;
      SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
      if (ctx == nullptr) return -1;
      SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
      bool ok = SSL_CTX_use_certificate_chain_file(ctx, o.tls_cert.c_str()) ==
                    1 &&
                SSL_CTX_use_PrivateKey_file(ctx, o.tls_key.c_str(),
                                            SSL_FILETYPE_PEM) == 1 &&
                SSL_CTX_check_private_key(ctx) == 1;
      if (ok && !o.tls_client_ca.empty()) {
        ok = SSL_CTX_load_verify_locations(ctx, o.tls_client_ca.c_str(),
                                           nullptr) == 1;
        SSL_CTX_set_verify(
            ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      }
      if (!ok) {
        SSL_CTX_free(ctx);
        return -1;
      }
      *ssl_ctx = ctx;
      return 1;
    };
  }
  mg_context* context = mg_start(&callbacks, impl.get(), civet_options);
  if (context == nullptr) {
    absl::MutexLock lock(&impl->log_mu);
    return absl::UnavailableError(
        impl->start_log.empty() ? "CivetWeb did not start" : impl->start_log);
  }
  {
    absl::MutexLock lock(&impl->log_mu);
    impl->context = context;
  }
  mg_server_port bound[4] = {};
  const int n = mg_get_server_ports(context, 4, bound);
  impl->port = n > 0 ? bound[0].port : 0;
  mg_set_request_handler(
      context, "/metrics",
      [](mg_connection* c, void* self) {
        return static_cast<Impl*>(self)->Metrics(c);
      },
      impl.get());
  mg_set_request_handler(
      context, "/ui",
      [](mg_connection* c, void* self) {
        return static_cast<Impl*>(self)->Ui(c);
      },
      impl.get());
  mg_set_request_handler(
      context, "/api/v1",
      [](mg_connection* c, void* self) {
        return static_cast<Impl*>(self)->Api(c);
      },
      impl.get());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), port_(impl_->port) {}

// CivetWeb notices a stop only when its accept poll returns, up to a few
// seconds later, so while it stops on another thread this one wakes it with
// a connection every 20 ms.
HttpServer::~HttpServer() {
  std::string host = SplitListen(impl_->options.listen).first;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  absl::Notification stopped;
  mg_context* context = impl_->context;
  std::thread stopper([&] {
    mg_stop(context);
    stopped.Notify();
  });
  while (!stopped.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    Poke(host, port_);
  }
  stopper.join();
}

}  // namespace sliced::server::api
