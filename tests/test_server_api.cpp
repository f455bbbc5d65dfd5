// The server's parts that need no socket: request parsing and validation, response shapes,
// the text stream (stop strings, UTF-8), the request queue.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "les/engine/text_stream.h"
#include "les/server/api_request.h"
#include "les/server/api_response.h"
#include "les/server/metrics.h"
#include "les/server/request_queue.h"

namespace les::server {
namespace {

using json = nlohmann::ordered_json;

int status_of(Endpoint e, const std::string& body, std::string* msg = nullptr) {
  try {
    parse_completion_request(e, body);
  } catch (const ApiError& err) {
    if (msg) *msg = err.what();
    return err.status();
  }
  return 200;
}

TEST(ServerApi, ChatRequestFieldsAndDefaults) {
  const CompletionRequest r = parse_completion_request(
      Endpoint::chat,
      R"({"model":"m","messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "stream":true,"stream_options":{"include_usage":true},"max_tokens":7,"temperature":0,"top_p":0.5,
          "top_k":3,"min_p":0.1,"repeat_penalty":1.1,"seed":-5,"stop":["x","yz"],"chat_template_kwargs":{"enable_thinking":false}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["role"], "system");  // developer is the system role
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temp, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-5}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);

  // Absent and null fields take llama.cpp's server defaults.
  const CompletionRequest d = parse_completion_request(
      Endpoint::chat, R"({"messages":[{"role":"user","content":"hi"}],"temperature":null,"stop":null})");
  EXPECT_FALSE(d.stream);
  EXPECT_EQ(d.max_tokens, -1);
  EXPECT_FLOAT_EQ(d.sampling.temp, 0.8f);
  EXPECT_EQ(d.sampling.top_k, 40);
  EXPECT_FALSE(d.seed_given);
  EXPECT_TRUE(d.stop.empty());
}

TEST(ServerApi, CompletionPromptForms) {
  EXPECT_EQ(parse_completion_request(Endpoint::completion, R"({"prompt":"abc"})").prompt_text, "abc");
  EXPECT_EQ(parse_completion_request(Endpoint::completion, R"({"prompt":["abc"]})").prompt_text, "abc");
  const CompletionRequest t = parse_completion_request(Endpoint::completion, R"({"prompt":[1,2,300],"stop":"\n"})");
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{1, 2, 300}));
  EXPECT_EQ(t.stop, std::vector<std::string>{"\n"});
}

TEST(ServerApi, BadRequestsAre400NamingTheField) {
  struct Case {
    Endpoint e;
    const char* body;
    const char* needle;  // in the message
  };
  const Case cases[] = {
      {Endpoint::chat, "", "malformed JSON"},
      {Endpoint::chat, "{\"messages\": [", "malformed JSON"},
      {Endpoint::chat, "[1,2]", "must be a JSON object"},
      {Endpoint::chat, "{}", "'messages' is required"},
      {Endpoint::chat, R"({"messages":"hi"})", "'messages' must be an array"},
      {Endpoint::chat, R"({"messages":[]})", "must not be empty"},
      {Endpoint::chat, R"({"messages":[3]})", "'messages[0]' must be an object"},
      {Endpoint::chat, R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {Endpoint::chat, R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "image_url.url"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "'temperature' must be a number"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})", "'temperature' must be in"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "'max_tokens' must be an integer"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-2})", "'max_tokens' must be in"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1e300})", "'max_tokens' must be in"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"top_k":99999999999999999999})", "'top_k'"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"n":2})", "'n' must be 1"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "'stream' must be a boolean"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "'stop'"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"model":7})", "'model' must be a string"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})", "'logprobs' is not supported"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":0.5})", "not supported"},
      {Endpoint::completion, R"({"prompt":["a","b"]})", "one prompt per request"},
      {Endpoint::completion, R"({"prompt":[1,-3]})", "out of range"},
      {Endpoint::completion, R"({"prompt":[1,"a"]})", "token ids"},
      {Endpoint::completion, R"({"prompt":{}})", "'prompt' must be"},
      {Endpoint::completion, R"({"max_tokens":3})", "'prompt' is required"},
  };
  for (const Case& c : cases) {
    std::string msg;
    EXPECT_EQ(status_of(c.e, c.body, &msg), 400) << c.body;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.body << " -> " << msg;
  }
}

TEST(ServerApi, DeepNestingAndHugeNumbersAreHandled) {
  std::string deep = R"({"messages":[{"role":"user","content":"x"}],"extra":)";
  for (int i = 0; i < 100000; ++i) deep += '[';
  EXPECT_EQ(status_of(Endpoint::chat, deep), 400);
  std::string deep_ok = R"({"messages":[{"role":"user","content":"x"}],"extra":)";
  for (int i = 0; i < 20000; ++i) deep_ok += '[';
  for (int i = 0; i < 20000; ++i) deep_ok += ']';
  deep_ok += "}";
  EXPECT_EQ(status_of(Endpoint::chat, deep_ok), 200);  // unknown fields are ignored, whatever they hold
  EXPECT_EQ(status_of(Endpoint::chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":1e999})"), 400);
}

TEST(ServerApi, ResponsesHaveOpenAIShapesAndSurviveBadUtf8) {
  const ResponseIdentity id = new_identity(Endpoint::chat, "tiny");
  EXPECT_EQ(id.id.rfind("chatcmpl-", 0), 0u);
  const Usage u{5, 3, 2};
  const json full = completion_response(Endpoint::chat, id, "hi\xff", "stop", u);
  const json back = json::parse(dump_json(full));
  EXPECT_EQ(back["object"], "chat.completion");
  EXPECT_EQ(back["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(back["choices"][0]["message"]["content"], "hi\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(back["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(back["usage"]["total_tokens"], 8);
  EXPECT_EQ(back["usage"]["prompt_tokens_details"]["cached_tokens"], 2);

  const std::string ev = sse_event(stream_chunk(Endpoint::completion, new_identity(Endpoint::completion, "tiny"), "x"));
  EXPECT_EQ(ev.rfind("data: {", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  const json chunk = json::parse(ev.substr(6));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], "x");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  const json last = stream_chunk(Endpoint::chat, id, "", "length", &u);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 3);

  const json err = error_body(ApiError(401, "bad key"));
  EXPECT_EQ(err["error"]["type"], "authentication_error");
  EXPECT_EQ(err["error"]["code"], 401);
}

TEST(TextStream, StopStringsAcrossPiecesAndUtf8) {
  {
    TextStream ts({"END"});
    std::string out = ts.push("abc E");
    EXPECT_EQ(out, "abc ");  // "E" may start "END"
    out += ts.push("N");
    EXPECT_EQ(out, "abc ");
    out += ts.push("Dxyz");
    EXPECT_TRUE(ts.stopped());
    EXPECT_EQ(out, "abc ");
    EXPECT_EQ(ts.push("more"), "");
    EXPECT_EQ(ts.finish(), "");
  }
  {
    TextStream ts({"END"});
    std::string out = ts.push("xE");
    out += ts.push("Nx");  // "EN" then "x": not a stop after all
    EXPECT_FALSE(ts.stopped());
    out += ts.finish();
    EXPECT_EQ(out, "xENx");
  }
  {
    TextStream ts({"ab", "b"});  // the earliest completed stop wins
    EXPECT_EQ(ts.push("xab"), "x");
    EXPECT_TRUE(ts.stopped());
  }
  {
    TextStream ts;
    const std::string snow = "\xE2\x98\x83";  // U+2603, three bytes
    EXPECT_EQ(ts.push(snow.substr(0, 1)), "");
    EXPECT_EQ(ts.push(snow.substr(1, 1)), "");
    EXPECT_EQ(ts.push(snow.substr(2) + "a"), snow + "a");
    EXPECT_EQ(ts.push("\xF0\x9F"), "");           // half an emoji
    EXPECT_EQ(ts.finish(), "\xF0\x9F");          // given back as bytes at the end
  }
  EXPECT_EQ(incomplete_utf8_tail("a\xC3"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("\x80\x80"), 0u);
}

TEST(RequestQueue, FirstComeFirstServedAndBounded) {
  RequestQueue q(2);
  auto a = q.try_enter();
  auto b = q.try_enter();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(q.try_enter(), nullptr) << "a third waiting request must be refused";
  ASSERT_TRUE(a->wait_turn(nullptr));
  EXPECT_TRUE(q.busy());
  auto c = q.try_enter();  // a left the line when it started running
  ASSERT_TRUE(c);
  std::atomic<int> order{0};
  int b_at = -1, c_at = -1;
  std::thread tc([&] {
    ASSERT_TRUE(c->wait_turn(nullptr, 5));
    c_at = order.fetch_add(1);
    c.reset();
  });
  std::thread tb([&] {
    ASSERT_TRUE(b->wait_turn(nullptr, 5));
    b_at = order.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b.reset();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  a.reset();
  tb.join();
  tc.join();
  EXPECT_EQ(b_at, 0);
  EXPECT_EQ(c_at, 1);
  EXPECT_FALSE(q.busy());
  EXPECT_EQ(q.waiting(), 0);
}

TEST(RequestQueue, AGoneWaiterLeavesTheLine) {
  RequestQueue q(4);
  auto a = q.try_enter();
  auto b = q.try_enter();
  auto c = q.try_enter();
  ASSERT_TRUE(a->wait_turn(nullptr));
  int polls = 0;
  EXPECT_FALSE(b->wait_turn([&] { return ++polls < 3; }, 1));
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(q.waiting(), 1);
  a.reset();
  EXPECT_TRUE(c->wait_turn(nullptr, 1)) << "c must not wait behind the departed b";
}

TEST(Metrics, PrometheusTextHasTheFigures) {
  Metrics m;
  m.record_request("/v1/completions", 200);
  m.record_request("/v1/completions", 200);
  m.record_request("/v1/chat/completions", 400);
  GenerationRecord g;
  g.prompt_tokens = 10;
  g.reused_tokens = 4;
  g.generated_tokens = 5;
  g.prompt_seconds = 0.5;
  g.generation_seconds = 2;
  m.record_generation(g);
  LayerStreamStats s{};
  s.selected = 100;
  s.hits = 60;
  s.in_flight = 20;
  s.bytes_demand = 1000;
  s.bytes_prefetch = 500;
  s.stall_s = 0.25;
  m.record_experts(s, 16, 4096);
  m.set_memory_budget(3u << 30);
  const std::string t = m.render(2, true);
  for (const char* want : {"les_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n",
                           "les_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1\n",
                           "les_prompt_tokens_total 10\n", "les_prompt_tokens_reused_total 4\n",
                           "les_generated_tokens_total 5\n", "les_decode_tokens_per_second 2\n",
                           "les_prefill_tokens_per_second 12\n", "les_requests_waiting 2\n", "les_requests_running 1\n",
                           "les_expert_cache_hit_ratio 0.59999999999999998\n", "les_expert_prepared_ratio 0.80000000000000004\n",
                           "les_expert_bytes_read_total 1500\n", "les_expert_stall_seconds_total 0.25\n",
                           "les_memory_budget_bytes 3221225472\n", "# TYPE les_resident_bytes gauge\n"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want;
  }
}

}  // namespace
}  // namespace les::server
