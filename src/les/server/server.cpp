#include "les/server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "les/engine/batch_generator.h"
#include "les/server/api_request.h"
#include "les/server/api_response.h"
#include "les/server/metrics.h"
#include "les/server/request_queue.h"
#include "les/util/error.h"
#include "les/util/clock.h"
#include "les/vision/image_decode.h"
#include "les/vision/image_prompt.h"

namespace les::server {

using json = nlohmann::ordered_json;

namespace {

// A request validated and tokenized, waiting to run.
struct Job {
  CompletionRequest req;
  std::vector<int32_t> prompt;
  // With images: the rendered chat prompt and the decoded images (encoded when the job runs).
  std::string rendered;
  std::vector<vision::ImageU8> images;
  int64_t positions = 0;
  ResponseIdentity identity;
  std::unique_ptr<RequestQueue::Ticket> ticket;
  double t_enqueued = 0;
};

}  // namespace

namespace parallel_detail {

// One request of batched serving, between its HTTP thread (which writes to the client) and the
// stepping thread (which generates): text flows one way, the cancel flag the other.
struct SlotLink {
  std::vector<int32_t> prompt;
  EngineRequest req;            // req.cancel points at cancel
  std::atomic<bool>* cancel = nullptr;  // the HTTP thread's flag (it waits for done, so it outlives the request)
  bool stream = false;                   // the reply is streamed: wake its thread for every piece
  std::mutex mu;
  std::condition_variable cv;
  std::string text;             // generated, not yet written (under mu)
  bool done = false;            // under mu; then result and error are set
  EngineResult result;
  std::string error;
};

}  // namespace parallel_detail

using parallel_detail::SlotLink;

struct Server::Impl {
  Engine& engine;
  ServerOptions opts;
  httplib::Server http;
  RequestQueue queue;
  Metrics metrics;
  int port = -1;
  std::atomic<bool> stopping{false};
  std::mutex running_mu;
  std::atomic<bool>* running_cancel = nullptr;  // the generation in progress, if any
  std::atomic<double> mean_request_s{1.0};       // for Retry-After

  // Batched serving (the engine's n_parallel > 1): requests whose turn came are handed to the
  // stepping thread, which runs the generator's steps while any request is active.
  const int n_parallel;
  std::unique_ptr<BatchGenerator> batch;
  std::thread stepper;
  std::mutex step_mu;
  std::condition_variable step_cv;
  std::deque<std::shared_ptr<SlotLink>> submitted;  // under step_mu
  bool stepper_quit = false;                         // under step_mu

  Impl(Engine& e, ServerOptions o)
      : engine(e), opts(std::move(o)), queue(opts.max_waiting, e.n_parallel()), n_parallel(e.n_parallel()) {
    metrics.set_slots(n_parallel);
    if (n_parallel > 1) {
      batch = std::make_unique<BatchGenerator>(engine);
      stepper = std::thread([this] { step_loop(); });
    }
  }

  ~Impl() {
    if (stepper.joinable()) {
      {
        std::lock_guard<std::mutex> lk(step_mu);
        stepper_quit = true;
      }
      step_cv.notify_all();
      stepper.join();
    }
  }

  // The expert cache's figures into the metrics; only from the thread that runs generations.
  void record_experts() {
    if (const StreamingExperts* ex = engine.experts()) {
      uint64_t cache_bytes = 0;
      for (const auto& [bytes, slots] : ex->stats().slot_classes) cache_bytes += bytes * static_cast<uint64_t>(slots);
      metrics.record_experts(ex->stats().total(), ex->stats().n_slots, cache_bytes);
    }
  }

  static void finish_link(SlotLink& link, EngineResult result, std::string error) {
    {
      std::lock_guard<std::mutex> lk(link.mu);
      link.result = std::move(result);
      link.error = std::move(error);
      link.done = true;
    }
    link.cv.notify_all();
  }

  // The stepping thread: starts submitted requests in free slots, steps while any is active,
  // hands each ended request's result to its HTTP thread. On stop, every request is cancelled
  // and ended before it returns; no request is left without an answer.
  void step_loop() {
    std::map<uint64_t, std::shared_ptr<SlotLink>> active;
    for (;;) {
      std::vector<std::shared_ptr<SlotLink>> starting;
      bool quit = false;
      {
        std::unique_lock<std::mutex> lk(step_mu);
        step_cv.wait(lk, [&] { return stepper_quit || !submitted.empty() || !batch->idle(); });
        quit = stepper_quit;
        while (!submitted.empty() && static_cast<int>(starting.size()) + batch->n_busy() < batch->n_slots()) {
          starting.push_back(std::move(submitted.front()));
          submitted.pop_front();
        }
      }
      for (std::shared_ptr<SlotLink>& link : starting) {
        SlotLink* l = link.get();
        try {
          const uint64_t id = batch->start(l->prompt, l->req, [l](std::string_view text) {
            {
              std::lock_guard<std::mutex> lk(l->mu);
              l->text.append(text);
            }
            // A non-streamed reply is written at the end: its thread need not wake for each piece
            // (on 2 cores those wake-ups take turns with the step's own threads).
            if (l->stream) l->cv.notify_all();
            return !l->cancel->load(std::memory_order_relaxed);
          });
          active[id] = std::move(link);
        } catch (const std::exception& e) {
          finish_link(*l, EngineResult{}, e.what());
        }
      }
      if (quit || stopping.load()) {
        for (auto& [id, link] : active) link->cancel->store(true);
      }
      if (!batch->idle()) {
        std::vector<BatchGenerator::Finished> ended;
        try {
          ended = batch->step();
        } catch (const std::exception& e) {  // step() reports failures per request; this is a last resort
          for (auto& [id, link] : active) link->cancel->store(true);
          std::fprintf(stderr, "les serve: a batched step failed: %s\n", e.what());
        }
        const BatchStepStats& st = batch->last_step();
        metrics.record_step(st.decode_tokens, st.prompt_tokens, batch->n_busy());
        if (!ended.empty()) record_experts();
        for (BatchGenerator::Finished& f : ended) {
          auto it = active.find(f.id);
          if (it == active.end()) continue;
          finish_link(*it->second, std::move(f.result), std::move(f.error));
          active.erase(it);
        }
      }
      if (quit && batch->idle()) {
        std::lock_guard<std::mutex> lk(step_mu);
        for (std::shared_ptr<SlotLink>& link : submitted) finish_link(*link, EngineResult{}, "the server is stopping");
        submitted.clear();
        return;
      }
    }
  }

  void reply_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    if (e.status() == 503) {
      const double per_request = mean_request_s.load() / n_parallel;
      const int wait = std::clamp(static_cast<int>(std::ceil(per_request * (queue.waiting() + 1))), 1, 60);
      res.set_header("Retry-After", std::to_string(wait));
    }
    res.set_content(dump_json(error_body(e)), "application/json");
  }

  void check_key(const httplib::Request& req) const {
    if (opts.api_key.empty()) return;
    const std::string want = "Bearer " + opts.api_key;
    if (req.get_header_value("Authorization") != want) {
      throw ApiError(401, "invalid or missing API key: send 'Authorization: Bearer KEY'");
    }
  }

  // Validates, applies the chat template, tokenizes and takes a place in line.
  std::unique_ptr<Job> prepare(Endpoint e, const httplib::Request& hreq) {
    check_key(hreq);
    auto job = std::make_unique<Job>();
    job->req = parse_completion_request(e, hreq.body);
    CompletionRequest& r = job->req;
    if (!r.model.empty() && r.model != opts.model_name) {
      throw ApiError(404, strfmt("the model '%s' does not exist: this server serves '%s'", r.model.c_str(),
                                 opts.model_name.c_str()), "model");
    }
    if (e == Endpoint::chat) {
      if (!engine.chat_template()) throw ApiError(500, engine.chat_template_error());
      std::string rendered;
      try {
        rendered = engine.render_chat(r.messages, true, r.template_kwargs);
      } catch (const Error& err) {
        throw ApiError(400, strfmt("the chat template rejected the messages: %s", err.what()), "messages");
      }
      job->prompt = engine.tokenize_chat(rendered);
      if (!r.images.empty()) prepare_images(*job, rendered);
    } else if (r.prompt_is_tokens) {
      const int32_t n_vocab = engine.tokenizer().n_tokens();
      for (int32_t t : r.prompt_tokens) {
        if (t >= n_vocab) throw ApiError(400, strfmt("token id %d is outside the vocabulary (%d tokens)", t, n_vocab), "prompt");
      }
      job->prompt = r.prompt_tokens;
    } else {
      job->prompt = engine.tokenize(r.prompt_text, true);
    }
    if (job->prompt.empty()) throw ApiError(400, "the prompt is empty", "prompt");
    const int n_ctx = engine.n_ctx();
    const int64_t positions = job->images.empty() ? static_cast<int64_t>(job->prompt.size()) : job->positions;
    if (positions >= n_ctx) {
      throw ApiError(400, strfmt("the prompt has %lld tokens%s but the context holds %d: shorten it or start the "
                                 "server with a larger --ctx-size", static_cast<long long>(positions),
                                 job->images.empty() ? "" : " (text and image tokens)", n_ctx),
                     e == Endpoint::chat ? "messages" : "prompt");
    }
    if (!r.seed_given) r.sampling.seed = std::random_device{}();
    job->identity = new_identity(e, opts.model_name);
    job->ticket = queue.try_enter();
    if (!job->ticket) {
      throw ApiError(503, strfmt("the server is busy: %d requests are waiting; retry later", opts.max_waiting));
    }
    job->t_enqueued = now_s();
    return job;
  }

  // A chat request's images: decoded now (bad bytes are the client's error), encoded when it runs.
  void prepare_images(Job& job, const std::string& rendered) {
    const CompletionRequest& r = job.req;
    if (!engine.has_vision()) {
      throw ApiError(400, "this server takes no images: it was started without a vision encoder (--mmproj)", "messages");
    }
    if (engine.drafter()) {
      throw ApiError(400, "images with speculative decoding are not supported: start the server without --spec", "messages");
    }
    if (n_parallel > 1) {
      throw ApiError(400, "images with batched serving are not supported: start the server with --parallel 1", "messages");
    }
    size_t markers = 0;
    for (size_t p = rendered.find(kImageMarker); p != std::string::npos; p = rendered.find(kImageMarker, p + 1)) ++markers;
    if (markers != r.images.size()) {
      throw ApiError(400, strfmt("the messages hold %zu images but %zu image markers ('%s' in a text part stands for an "
                                 "image)", r.images.size(), markers, std::string(kImageMarker).c_str()), "messages");
    }
    job.rendered = rendered;
    int64_t text_tokens = static_cast<int64_t>(job.prompt.size());
    int64_t positions = 0;
    for (size_t i = 0; i < r.images.size(); ++i) {
      const std::string what = strfmt("image %zu of the messages", i);
      try {
        job.images.push_back(vision::decode_image_bytes(reinterpret_cast<const uint8_t*>(r.images[i].data()),
                                                        r.images[i].size(), what));
        positions += vision::image_positions(*engine.mmproj(), job.images.back().width, job.images.back().height,
                                             engine.options().image_compression);
      } catch (const Error& e) {
        throw ApiError(400, e.what(), "messages");
      }
    }
    // The marker text was tokenized too: an upper bound is enough for the context check.
    job.positions = text_tokens + positions;
  }

  // Batched serving: hands the job to the stepping thread and writes its text as it comes (all
  // that arrived since the last write in one piece), with a heartbeat while nothing comes; a failed
  // write cancels the request. Returns when the request has ended and left its slot.
  void generate_batched(Job& job, const EngineRequest& er, std::atomic<bool>& cancel, const std::function<bool(const std::string&)>& write,
                        EngineResult& res, std::string& error) {
    const CompletionRequest& r = job.req;
    auto link = std::make_shared<SlotLink>();
    link->prompt = job.prompt;
    link->req = er;
    link->cancel = &cancel;
    link->stream = r.stream;
    {
      std::lock_guard<std::mutex> lk(step_mu);
      submitted.push_back(link);
    }
    step_cv.notify_all();
    double last_write = now_s();
    for (;;) {
      std::string text;
      bool done = false;
      {
        std::unique_lock<std::mutex> lk(link->mu);
        link->cv.wait_for(lk, std::chrono::milliseconds(opts.heartbeat_ms), [&] { return link->done || !link->text.empty(); });
        text.swap(link->text);
        done = link->done;
      }
      bool ok = true;
      if (!text.empty() && r.stream) {
        ok = write(sse_event(stream_chunk(r.endpoint, job.identity, text)));
        last_write = now_s();
      } else if (!done && now_s() - last_write >= opts.heartbeat_ms * 1e-3) {
        // JSON allows leading whitespace, server-sent events comment lines: a failed write means the client left.
        ok = write(r.stream ? ": generating\n\n" : " ");
        last_write = now_s();
      }
      if (!ok) link->cancel->store(true);
      if (done) break;
    }
    std::lock_guard<std::mutex> lk(link->mu);
    res = std::move(link->result);
    error = std::move(link->error);
  }

  // Runs a job whose turn has come; `write` sends bytes to the client (false: it is gone).
  void run_job(Job& job, const std::function<bool(const std::string&)>& write) {
    const CompletionRequest& r = job.req;
    const Endpoint e = r.endpoint;
    std::atomic<bool> cancel{false};
    if (n_parallel == 1) {  // batched requests are cancelled on stop by the stepping thread
      std::lock_guard<std::mutex> lk(running_mu);
      running_cancel = &cancel;
    }
    if (stopping.load()) cancel.store(true);
    GenerationRecord rec;
    rec.queue_seconds = now_s() - job.t_enqueued;
    EngineRequest er;
    er.n_predict = r.max_tokens;
    er.sampling = r.sampling;
    er.stop_at_eog = !r.ignore_eos;
    er.stop = r.stop;
    er.cancel = &cancel;
    double last_write = now_s();
    if (r.stream && e == Endpoint::chat && !write(sse_event(role_chunk(job.identity)))) cancel.store(true);
    const double t0 = now_s();
    EngineResult res;
    std::string error;
    if (n_parallel > 1) {
      generate_batched(job, er, cancel, write, res, error);
    } else {
      try {
        const auto on_text = [&](std::string_view text) {
          bool ok = true;
          if (r.stream) {
            ok = write(sse_event(stream_chunk(e, job.identity, std::string(text))));
            last_write = now_s();
          } else if (now_s() - last_write >= opts.heartbeat_ms * 1e-3) {
            ok = write(" ");  // JSON allows leading whitespace; a failed write means the client left
            last_write = now_s();
          }
          if (!ok) cancel.store(true);
          return ok;
        };
        if (job.images.empty()) {
          res = engine.generate(job.prompt, er, on_text);
        } else {
          res = engine.generate(engine.media_prompt(job.rendered, job.images, true), er, on_text);
        }
      } catch (const std::exception& ex) {
        error = ex.what();
      }
    }
    {
      std::lock_guard<std::mutex> lk(running_mu);
      running_cancel = nullptr;
    }
    const double took = now_s() - t0;
    mean_request_s.store(0.8 * mean_request_s.load() + 0.2 * took);
    rec.prompt_tokens = res.n_prompt;
    rec.reused_tokens = res.n_reused;
    rec.generated_tokens = res.n_generated;
    rec.prompt_seconds = res.stats.prompt_seconds;
    rec.generation_seconds = res.stats.gen_seconds;
    rec.cancelled = cancel.load();
    metrics.record_generation(rec);
    if (n_parallel == 1) record_experts();  // batched: by the stepping thread, which owns the engine
    if (cancel.load()) return;
    if (!error.empty()) {
      const ApiError err(500, "generation failed: " + error);
      write(r.stream ? sse_event(error_body(err)) : dump_json(error_body(err)));
      return;
    }
    Usage u;
    u.prompt_tokens = res.n_prompt;
    u.completion_tokens = res.n_generated;
    u.cached_tokens = res.n_reused;
    const std::string finish = res.finish_reason == "length" ? "length" : "stop";
    if (r.stream) {
      std::string tail = sse_event(stream_chunk(e, job.identity, "", finish, &u));
      if (r.include_usage) tail += sse_event(usage_chunk(e, job.identity, u));
      write(tail + "data: [DONE]\n\n");
    } else {
      write(dump_json(completion_response(e, job.identity, res.text, finish, u)));
    }
  }

  void handle_completion(Endpoint e, const httplib::Request& hreq, httplib::Response& hres) {
    std::shared_ptr<Job> job;
    try {
      job = prepare(e, hreq);
    } catch (const ApiError& err) {
      reply_error(hres, err);
      return;
    }
    hres.status = 200;
    if (job->req.stream) {
      hres.set_header("Cache-Control", "no-cache");
      hres.set_header("X-Accel-Buffering", "no");
    }
    const bool stream = job->req.stream;
    hres.set_chunked_content_provider(
        stream ? "text/event-stream" : "application/json",
        [this, job, stream](size_t, httplib::DataSink& sink) {
          const auto write = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
          const bool turn = job->ticket->wait_turn([&] {
            if (stopping.load()) return false;
            return write(stream ? ": waiting\n\n" : " ");
          }, opts.heartbeat_ms);
          if (turn) run_job(*job, write);
          job->ticket.reset();
          sink.done();
          return true;
        },
        [job](bool) { job->ticket.reset(); });
  }

  void routes() {
    http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& s) {
      handle_completion(Endpoint::chat, q, s);
    });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) {
      handle_completion(Endpoint::completion, q, s);
    });
    http.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& s) {
      try {
        check_key(q);
      } catch (const ApiError& err) {
        reply_error(s, err);
        return;
      }
      const ModelConfig& c = engine.model().config();
      json m = json::object();
      m["id"] = opts.model_name;
      m["object"] = "model";
      m["created"] = static_cast<int64_t>(std::time(nullptr));
      m["owned_by"] = "les";
      m["meta"] = json{{"n_ctx", engine.n_ctx()}, {"n_vocab", c.n_vocab}, {"n_layer", c.n_layer},
                       {"n_expert", c.n_expert}, {"n_expert_used", c.n_expert_used},
                       {"memory_budget", engine.budget().total}};
      s.set_content(dump_json(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& s) {
      s.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request& q, httplib::Response& s) {
      try {
        check_key(q);
      } catch (const ApiError& err) {
        reply_error(s, err);
        return;
      }
      s.set_content(metrics.render(queue.waiting(), queue.running()), "text/plain; version=0.0.4");
    });
    http.set_error_handler([](const httplib::Request& q, httplib::Response& s) {
      if (!s.body.empty()) return;  // already an API error
      std::string msg = strfmt("HTTP %d", s.status);
      if (s.status == 404) msg = strfmt("no such endpoint: %s %s", q.method.c_str(), q.path.c_str());
      if (s.status == 413) msg = "the request body is too large";
      if (s.status == 400) msg = "malformed HTTP request";
      s.set_content(dump_json(error_body(ApiError(s.status, msg))), "application/json");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& s, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      s.status = 500;
      s.set_content(dump_json(error_body(ApiError(500, what))), "application/json");
    });
    http.set_logger([this](const httplib::Request& q, const httplib::Response& s) {
      metrics.record_request(q.path, s.status);
    });
  }
};

Server::Server(Engine& engine, ServerOptions opts) : impl_(std::make_unique<Impl>(engine, std::move(opts))) {
  Impl& m = *impl_;
  const int threads = m.opts.max_waiting + m.n_parallel + 8;
  m.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  m.http.set_payload_max_length(m.opts.max_body_bytes);
  m.http.set_read_timeout(30, 0);
  m.http.set_write_timeout(30, 0);
  m.routes();
  m.metrics.set_memory_budget(engine.budget().total);
}

Server::~Server() = default;

int Server::bind() {
  Impl& m = *impl_;
  if (m.opts.port == 0) {
    m.port = m.http.bind_to_any_port(m.opts.host);
  } else {
    m.port = m.http.bind_to_port(m.opts.host, m.opts.port) ? m.opts.port : -1;
  }
  if (m.port < 0) {
    throw Error(strfmt("cannot listen on %s:%d (address in use, or not an address of this machine)",
                       m.opts.host.c_str(), m.opts.port));
  }
  return m.port;
}

void Server::run() {
  Impl& m = *impl_;
  if (m.port < 0) bind();
  // The listener returns on stop() and also when accept() fails for reasons other than too many
  // open files (e.g. a connection aborted before it was accepted): then listen again on the same
  // port rather than let one client's reset end the server.
  for (int attempt = 0; !m.stopping.load(); ++attempt) {
    m.http.listen_after_bind();
    if (m.stopping.load()) return;
    std::fprintf(stderr, "les serve: the listener stopped unexpectedly; listening again on port %d\n", m.port);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 10 << std::min(attempt, 6))));
    if (!m.http.bind_to_port(m.opts.host, m.port)) {
      if (m.stopping.load()) return;
      throw Error(strfmt("lost the listening socket on %s:%d and cannot bind it again", m.opts.host.c_str(), m.port));
    }
  }
}

void Server::stop() {
  Impl& m = *impl_;
  m.stopping.store(true);
  {
    std::lock_guard<std::mutex> lk(m.running_mu);
    if (m.running_cancel) m.running_cancel->store(true);
  }
  m.http.stop();
}

}  // namespace les::server
