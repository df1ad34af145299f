#include "server/api/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "base/quote.h"
#include "httplib.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/summary.h"
#include "prometheus/text_serializer.h"
#include "server/api/web_assets.h"

namespace sliced::server::api {
namespace {

constexpr char kJson[] = "application/json";
// No request of ours has a body: a cap in case cpp-httplib reads one.
constexpr size_t kMaxRequestBody = 64 * 1024;

bool IsLoopbackPeer(absl::string_view addr) {
  return absl::StartsWith(addr, "127.") || addr == "::1" ||
         absl::StartsWith(addr, "::ffff:127.");
}

// Whether a Host header ("name[:port]", "[v6][:port]") names this host by a
// loopback name or address.
bool IsLoopbackHost(absl::string_view host) {
  host = absl::StripAsciiWhitespace(host);
  absl::string_view name = host;
  if (absl::ConsumePrefix(&name, "[")) {
    const size_t close = name.find(']');
    if (close == absl::string_view::npos) return false;
    return name.substr(0, close) == "::1";
  }
  const size_t colon = name.rfind(':');
  if (colon != absl::string_view::npos) name = name.substr(0, colon);
  if (absl::EqualsIgnoreCase(name, "localhost")) return true;
  // An address in 127.0.0.0/8, not a name that starts like one
  // ("127.0.0.1.example.com" is the attacker's name to re-point).
  in_addr address;
  return inet_pton(AF_INET, std::string(name).c_str(), &address) == 1 &&
         (ntohl(address.s_addr) >> 24) == 127;
}

absl::string_view ContentType(absl::string_view name) {
  if (absl::EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(name, ".css")) return "text/css; charset=utf-8";
  if (absl::EndsWith(name, ".png")) return "image/png";
  return "application/octet-stream";
}

// The value of cookie `name` in a Cookie header ("a=1; b=2"); "" if none.
std::string CookieValue(absl::string_view header, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

// The bearer token of a request: an `Authorization: Bearer` header (the
// scheme in any case), else the sliced_token cookie (also behind a proxy
// that sends its own Authorization, e.g. Basic); "" when neither.
std::string TokenOf(const httplib::Request& request) {
  const std::string header = request.get_header_value("Authorization");
  absl::string_view value = absl::StripAsciiWhitespace(header);
  if (value.size() > 7 && absl::StartsWithIgnoreCase(value, "bearer ")) {
    return std::string(absl::StripAsciiWhitespace(value.substr(7)));
  }
  return CookieValue(request.get_header_value("Cookie"), "sliced_token");
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

  void Metrics(httplib::Response& response);
  void Ui(absl::string_view name, httplib::Response& response) const;
  void Api(const httplib::Request& request, absl::string_view path,
           httplib::Response& response) const;

  const Options options;
  mutable absl::Mutex mu;
  absl::Status refusal ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  const WebApi* const api;
  // The three series prometheus::Exposer served about itself.
  std::shared_ptr<prometheus::Registry> exposer_registry;
  prometheus::Counter& bytes_transferred;
  prometheus::Counter& scrapes;
  prometheus::Summary& latencies;

  std::unique_ptr<httplib::Server> server;
  std::thread listener;
  // Set once listen_after_bind() returned (it failed, or stop() ended it).
  std::atomic<bool> listen_returned{false};
};

void HttpServer::Impl::Metrics(httplib::Response& response) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : collectables) {
    std::vector<prometheus::MetricFamily> more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  std::string body = prometheus::TextSerializer().Serialize(families);
  const size_t size = body.size();
  response.set_content(std::move(body), "text/plain; charset=utf-8");
  latencies.Observe(static_cast<double>(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - start)
          .count()));
  bytes_transferred.Increment(static_cast<double>(size));
  scrapes.Increment();
}

void HttpServer::Impl::Ui(absl::string_view name,
                          httplib::Response& response) const {
  const WebAsset* asset = FindWebAsset(name.empty() ? "index.html" : name);
  if (asset == nullptr) {
    response.status = 404;
    response.set_content("no such file\n", "text/plain; charset=utf-8");
    return;
  }
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Content-Type-Options", "nosniff");
  response.set_header("X-Frame-Options", "DENY");
  response.set_header("Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; "
                      "style-src 'self' 'unsafe-inline'; "
                      "frame-ancestors 'none'");
  response.set_content(asset->content.data(), asset->content.size(),
                       std::string(ContentType(asset->name)));
}

void HttpServer::Impl::Api(const httplib::Request& request,
                           absl::string_view path,
                           httplib::Response& response) const {
  absl::Status admitted = absl::OkStatus();
  if (options.auth == nullptr) {
    if (!IsLoopbackPeer(request.remote_addr)) {
      admitted = absl::PermissionDeniedError(
          "without --auth_tokens the web API answers loopback clients only");
    } else if (!IsLoopbackHost(request.get_header_value("Host"))) {
      admitted = absl::PermissionDeniedError(absl::StrCat(
          "without --auth_tokens the web API answers requests for a "
          "loopback host only (Host: localhost, 127.x.x.x or [::1]), not ",
          Quote(request.get_header_value("Host"))));
    }
  } else {
    const std::string token = TokenOf(request);
    admitted = token.empty()
                   ? absl::UnauthenticatedError(
                         "missing 'Authorization: Bearer <token>' header or "
                         "sliced_token cookie")
                   : options.auth->CheckToken(token, Access::kRead);
  }
  std::map<std::string, std::string> params;
  for (const auto& [name, value] : request.params) params.emplace(name, value);
  // A standby holds no data to guard (and no tokens): it says where the
  // data is to any caller.
  if (api == nullptr) {
    admitted = absl::UnavailableError(
        "this sliced is a standby: its web API is on the leader");
  }
  if (admitted.ok()) {
    absl::MutexLock lock(&mu);
    admitted = refusal;
  }
  const WebReply reply =
      admitted.ok() ? api->Get(path, params) : ErrorReply(admitted);
  response.status = reply.http_status;
  response.set_header("Cache-Control", "no-store");
  response.set_header("X-Content-Type-Options", "nosniff");
  response.set_content(reply.body, kJson);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const Options& options,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    const WebApi* api) {
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  std::string host =
      colon == std::string::npos ? "" : options.listen.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  if (colon == std::string::npos || host.empty() ||
      !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quote(options.listen), " is not host:port"));
  }
  auto impl = std::make_unique<Impl>(options, std::move(collectables), api);
  if (options.tls_cert.empty()) {
    impl->server = std::make_unique<httplib::Server>();
  } else {
    // Mutual TLS as on gRPC: with a client CA, a verified client
    // certificate is required.
    impl->server = std::make_unique<httplib::SSLServer>(
        options.tls_cert.c_str(), options.tls_key.c_str(),
        options.tls_client_ca.empty() ? nullptr
                                      : options.tls_client_ca.c_str());
  }
  httplib::Server& server = *impl->server;
  if (!server.is_valid()) {
    return absl::UnavailableError(
        "can't load --tls_cert / --tls_key / --tls_client_ca for HTTPS");
  }
  // SO_REUSEADDR only: cpp-httplib's default SO_REUSEPORT would let a
  // second daemon bind the same port and split the scrapes.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Before cpp-httplib reads a body (it has no limit of its own, and would
  // inflate a compressed one): anything but GET and HEAD is refused here
  // and its connection closed. A Range header is ignored (RFC 9110 lets a
  // server do so): cpp-httplib would copy the whole body once per range,
  // and "bytes=-,-,…" asks for thousands of copies.
  server.set_payload_max_length(kMaxRequestBody);
  server.set_pre_routing_handler(
      [](const httplib::Request& request, httplib::Response& response) {
        // cpp-httplib's Request is its own non-const local, handed over as
        // const: clearing the parsed ranges changes nothing else.
        const_cast<httplib::Request&>(request).ranges.clear();
        if (request.method == "GET" || request.method == "HEAD") {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        WebReply reply = ErrorReply(absl::UnimplementedError(
            "read-only: GET only (changes go through the gRPC API)"));
        response.status = 405;
        response.set_header("Allow", "GET");
        response.set_header("Connection", "close");
        response.set_content(reply.body, kJson);
        return httplib::Server::HandlerResponse::Handled;
      });
  // A kept-alive connection holds one of the server's worker threads until
  // it idles out; pages poll every 3 s, so idle connections go after 1 s
  // and open pages never starve /metrics of workers.
  server.set_keep_alive_timeout(1);
  Impl* self = impl.get();
  server.Get("/metrics", [self](const httplib::Request&,
                                httplib::Response& response) {
    self->Metrics(response);
  });
  server.Get("/ui", [self](const httplib::Request&, httplib::Response& r) {
    self->Ui("", r);
  });
  server.Get(R"(/ui/([A-Za-z0-9._-]*))",
             [self](const httplib::Request& request, httplib::Response& r) {
               self->Ui(request.matches[1].str(), r);
             });
  server.Get(R"(/api/v1/(.*))",
             [self](const httplib::Request& request, httplib::Response& r) {
               self->Api(request, request.matches[1].str(), r);
             });

  const int bound = port == 0 ? server.bind_to_any_port(host)
                              : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("can't bind ", Quote(options.listen),
                     " (address in use or not a local address)"));
  }
  impl->listener = std::thread([&server, self] {
    server.listen_after_bind();
    self->listen_returned = true;
  });
  // cpp-httplib 0.11's stop() does nothing until the listener runs its
  // accept loop (is_running()): a server stopped before that (a standby's
  // port closed as soon as it is elected) would wait in accept() for good,
  // and so would its destructor. So Start returns once it runs.
  while (!server.is_running() && !impl->listen_returned) {
    absl::SleepFor(absl::Microseconds(100));
  }
  if (impl->listen_returned) {
    impl->listener.join();
    return absl::UnavailableError(absl::StrCat(
        "can't listen on ", Quote(options.listen), " (the listener ended)"));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), bound));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

void HttpServer::Refuse(const absl::Status& refusal) {
  absl::MutexLock lock(&impl_->mu);
  impl_->refusal = refusal;
}

HttpServer::~HttpServer() {
  impl_->server->stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

}  // namespace sliced::server::api
