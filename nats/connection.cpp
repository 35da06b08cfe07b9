#include "nats/connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace shmbus::nats {

std::string status_text(natsStatus s) {
  std::string out = natsStatus_GetText(s);
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  if (detail != nullptr && *detail != '\0' && std::string_view(detail).find(out) == std::string_view::npos) {
    out += " (";
    out += detail;
    out += ")";
  }
  return out;
}

bool is_fatal(const GatewayError& e) {
  const std::string_view what = e.what();
  return what.find("not found") != std::string_view::npos || what.find("permission") != std::string_view::npos ||
         what.find("not enabled") != std::string_view::npos;
}

std::string js_error_text(const std::string& what, natsStatus s, jsErrCode code,
                          const std::string& async_error) {
  const std::string lower_async = [&] {
    std::string a = async_error;
    std::transform(a.begin(), a.end(), a.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return a;
  }();
  if (lower_async.find("permission") != std::string::npos) {
    return fmt::format("{}: permission denied by the server ({})", what, async_error);
  }
  if (code == JSStreamNotFoundErr) return fmt::format("{}: stream not found", what);
  if (code == JSConsumerNotFoundErr) return fmt::format("{}: consumer not found", what);
  if (code == JSNotEnabledErr || code == JSNotEnabledForAccountErr) {
    return fmt::format("{}: JetStream is not enabled on the server (nats-server -js)", what);
  }
  if (s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT) {
    return fmt::format("{}: no answer from JetStream ({}); is the server started with -js, and may this user use it?",
                       what, natsStatus_GetText(s));
  }
  if (code != 0) return fmt::format("{}: {} (JetStream error {})", what, status_text(s), static_cast<int>(code));
  return fmt::format("{}: {}", what, status_text(s));
}

natsStatus add_file_stream(jsCtx* js, const std::string& stream, const std::string& subject, jsErrCode& code) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = stream.c_str();
  const char* subjects[] = {subject.c_str()};
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  jsStreamInfo* si = nullptr;
  const natsStatus s = js_AddStream(&si, js, &cfg, nullptr, &code);
  if (si != nullptr) jsStreamInfo_Destroy(si);
  return s;
}

Connection::Connection(const ConnectArgs& a, std::int64_t max_pending, jsPubAckHandler ack_handler,
                       void* ack_closure)
    : max_backoff_ms_(std::max<std::int64_t>(a.max_backoff_ms, 50)) {
  auto fail = [&](const std::string& what, natsStatus s) {
    this->~Connection();
    throw GatewayError(fmt::format("{}: {}", what, status_text(s)));
  };
  natsStatus s = natsOptions_Create(&opts_);
  if (s != NATS_OK) fail("cannot set up the NATS client", s);
  if ((s = natsOptions_SetURL(opts_, a.server.c_str())) != NATS_OK) fail(fmt::format("--server '{}'", a.server), s);
  if (!a.creds.empty() &&
      (s = natsOptions_SetUserCredentialsFromFiles(opts_, a.creds.c_str(), nullptr)) != NATS_OK) {
    fail(fmt::format("--creds '{}'", a.creds), s);
  }
  if (!a.tls_ca.empty()) {
    if ((s = natsOptions_SetSecure(opts_, true)) != NATS_OK) fail("TLS", s);
    if ((s = natsOptions_LoadCATrustedCertificates(opts_, a.tls_ca.c_str())) != NATS_OK) {
      fail(fmt::format("--tls-ca '{}'", a.tls_ca), s);
    }
  }
  if (!a.tls_cert.empty() || !a.tls_key.empty()) {
    if ((s = natsOptions_SetSecure(opts_, true)) != NATS_OK) fail("TLS", s);
    if ((s = natsOptions_LoadCertificatesChain(opts_, a.tls_cert.c_str(), a.tls_key.c_str())) != NATS_OK) {
      fail(fmt::format("--tls-cert '{}' / --tls-key '{}'", a.tls_cert, a.tls_key), s);
    }
  }
  natsOptions_SetTimeout(opts_, a.connect_timeout_ms);
  natsOptions_SetMaxReconnect(opts_, -1);  // a server restarting is waited for, not fatal
  natsOptions_SetCustomReconnectDelay(opts_, &Connection::reconnect_delay, this);
  natsOptions_SetReconnectBufSize(opts_, 32 * 1024 * 1024);
  natsOptions_SetDisconnectedCB(opts_, &Connection::on_disconnected, this);
  natsOptions_SetReconnectedCB(opts_, &Connection::on_reconnected, this);
  natsOptions_SetErrorHandler(opts_, &Connection::on_async_error, this);
  s = natsConnection_Connect(&nc_, opts_);
  if (s != NATS_OK) fail(fmt::format("cannot connect to {}", a.server), s);

  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = a.api_timeout_ms;
  if (max_pending > 0) jo.PublishAsync.MaxPending = max_pending;
  jo.PublishAsync.AckHandler = ack_handler;
  jo.PublishAsync.AckHandlerClosure = ack_closure;
  jo.PublishAsync.StallWait = 100;
  s = natsConnection_JetStream(&js_, nc_, &jo);
  if (s != NATS_OK) fail("cannot open a JetStream context", s);
}

Connection::~Connection() {
  if (js_ != nullptr) {
    // Publishes still unanswered are owned by the context until taken back:
    // take them and free them (a restart republishes from the stream's end).
    natsMsgList pending{};
    if (published_async_ && js_PublishAsyncGetPendingList(&pending, js_) == NATS_OK) natsMsgList_Destroy(&pending);
    jsCtx_Destroy(js_);
  }
  js_ = nullptr;
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
  }
  nc_ = nullptr;
  if (opts_ != nullptr) natsOptions_Destroy(opts_);
  opts_ = nullptr;
}

bool Connection::connected() const noexcept {
  return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
}

std::string Connection::last_async_error() const {
  std::lock_guard lock(error_mutex_);
  return async_error_;
}

void Connection::check_stream(const std::string& stream, std::string_view if_missing) const {
  jsStreamInfo* si = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &code);
  if (si != nullptr) jsStreamInfo_Destroy(si);
  if (s == NATS_OK) return;
  std::string what = js_error_text(fmt::format("stream '{}'", stream), s, code, last_async_error());
  if (code == JSStreamNotFoundErr && !if_missing.empty()) what += fmt::format(" ({})", if_missing);
  throw GatewayError(what);
}

void Connection::on_disconnected(natsConnection*, void*) {}

void Connection::on_reconnected(natsConnection*, void* self) {
  static_cast<Connection*>(self)->reconnects_.fetch_add(1, std::memory_order_relaxed);
}

void Connection::on_async_error(natsConnection*, natsSubscription*, natsStatus err, void* self) {
  auto* c = static_cast<Connection*>(self);
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  std::lock_guard lock(c->error_mutex_);
  c->async_error_ = natsStatus_GetText(err);
  if (c->nc_ != nullptr) {
    const char* text = nullptr;
    if (natsConnection_GetLastError(c->nc_, &text) != NATS_OK && text != nullptr && *text != '\0') {
      c->async_error_ = text;
    }
  }
  if (detail != nullptr && *detail != '\0' && c->async_error_.find(detail) == std::string::npos) {
    c->async_error_ += std::string(" (") + detail + ")";
  }
}

// 50 ms, 100 ms, 200 ms ... up to max_backoff_ms: a server that restarts in a
// second is back within a second; one that is down for long is not hammered.
int64_t Connection::reconnect_delay(natsConnection*, int attempts, void* self) {
  const auto* c = static_cast<Connection*>(self);
  const int shift = std::min(attempts, 10);
  return std::min<std::int64_t>(std::int64_t{50} << shift, c->max_backoff_ms_);
}

}  // namespace shmbus::nats
