// The router's I/O helpers: KV event batches decoded from msgpack as vLLM (old and new)
// and torchtpu encode them, hostile payloads refused, and the text it reads from replicas.
#include <gtest/gtest.h>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

#include "router/http_util.h"
#include "router/kv_event_decoder.h"

namespace torchtpu::router {
namespace {

using serve::KvEventKind;

std::string pack(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& fill) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  fill(pk);
  return std::string(buf.data(), buf.size());
}

void pack_str(msgpack::packer<msgpack::sbuffer>& pk, const std::string& s) { pk.pack(s); }

TEST(RouterKvEventDecoder, MapEventsInAPositionalBatch) {
  // [ts, [{type: BlockStored, ...}, {type: BlockRemoved, ...}, {type: AllBlocksCleared},
  //       {type: SomethingNew}], 0]
  const std::string payload = pack([](auto& pk) {
    pk.pack_array(3);
    pk.pack(12.5);
    pk.pack_array(4);
    pk.pack_map(9);
    pack_str(pk, "type"); pack_str(pk, "BlockStored");
    pack_str(pk, "block_hashes"); pk.pack(std::vector<uint64_t>{18446744073709551615ull, 7});
    pack_str(pk, "parent_block_hash"); pk.pack(uint64_t{3});
    pack_str(pk, "token_ids"); pk.pack(std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
    pack_str(pk, "block_size"); pk.pack(4);
    pack_str(pk, "lora_id"); pk.pack_nil();
    pack_str(pk, "medium"); pack_str(pk, "GPU");
    pack_str(pk, "lora_name"); pk.pack_nil();
    pack_str(pk, "group_idx"); pk.pack(0);  // a newer field: ignored
    pk.pack_map(3);
    pack_str(pk, "type"); pack_str(pk, "BlockRemoved");
    pack_str(pk, "block_hashes"); pk.pack(std::vector<uint64_t>{7});
    pack_str(pk, "medium"); pack_str(pk, "GPU");
    pk.pack_map(1);
    pack_str(pk, "type"); pack_str(pk, "AllBlocksCleared");
    pk.pack_map(1);
    pack_str(pk, "type"); pack_str(pk, "SomethingNew");
    pk.pack(0);
  });
  auto batch = decode_kv_event_batch(payload);
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  EXPECT_DOUBLE_EQ(batch->ts, 12.5);
  ASSERT_EQ(batch->events.size(), 3u);
  EXPECT_EQ(batch->num_ignored_events, 1);
  const auto& s = batch->events[0];
  EXPECT_EQ(s.kind, KvEventKind::kBlockStored);
  EXPECT_EQ(s.block_hashes, (std::vector<serve::BlockHash>{18446744073709551615ull, 7}));
  ASSERT_TRUE(s.parent_block_hash.has_value());
  EXPECT_EQ(*s.parent_block_hash, 3u);
  EXPECT_EQ(s.token_ids.size(), 8u);
  EXPECT_EQ(s.block_size, 4);
  EXPECT_EQ(batch->events[1].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(batch->events[2].kind, KvEventKind::kAllBlocksCleared);
}

TEST(RouterKvEventDecoder, OlderVllmPositionalEvents) {
  // vLLM before it dropped array_like: [ts, [["BlockStored", hashes, None, tokens, 16,
  // None, "GPU"], ["BlockRemoved", hashes, "GPU"], ["AllBlocksCleared"]]]
  const std::string payload = pack([](auto& pk) {
    pk.pack_array(2);
    pk.pack(1);  // an integer timestamp is a number too
    pk.pack_array(3);
    pk.pack_array(7);
    pack_str(pk, "BlockStored");
    pk.pack(std::vector<int64_t>{-5});  // Python's hash() can be negative
    pk.pack_nil();
    pk.pack(std::vector<int>(16, 9));
    pk.pack(16);
    pk.pack_nil();
    pack_str(pk, "GPU");
    pk.pack_array(3);
    pack_str(pk, "BlockRemoved");
    pk.pack(std::vector<int64_t>{-5});
    pack_str(pk, "GPU");
    pk.pack_array(1);
    pack_str(pk, "AllBlocksCleared");
  });
  auto batch = decode_kv_event_batch(payload);
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  ASSERT_EQ(batch->events.size(), 3u);
  EXPECT_EQ(batch->events[0].block_hashes[0], static_cast<uint64_t>(int64_t{-5}));
  EXPECT_FALSE(batch->events[0].parent_block_hash.has_value());
  EXPECT_EQ(batch->events[1].block_hashes, batch->events[0].block_hashes);
}

TEST(RouterKvEventDecoder, BadPayloadsAreErrorsNotCrashes) {
  const std::string truncated = pack([](auto& pk) {
    pk.pack_array(3);
    pk.pack(1.0);
  });
  EXPECT_FALSE(decode_kv_event_batch(truncated).ok());
  EXPECT_FALSE(decode_kv_event_batch("").ok());
  EXPECT_FALSE(decode_kv_event_batch(std::string("\xdd\xff\xff\xff\xff", 5)).ok());  // 4G array
  const std::string wrong_type = pack([](auto& pk) {
    pk.pack_array(2);
    pk.pack(1.0);
    pk.pack_array(1);
    pk.pack_map(2);
    pack_str(pk, "type"); pack_str(pk, "BlockStored");
    pack_str(pk, "block_hashes"); pack_str(pk, "not a list");
  });
  auto bad = decode_kv_event_batch(wrong_type);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("router: KV event batch"), std::string::npos);
  const std::string no_tag = pack([](auto& pk) {
    pk.pack_array(2);
    pk.pack(1.0);
    pk.pack_array(1);
    pk.pack_map(1);
    pack_str(pk, "block_hashes"); pk.pack(std::vector<int>{1});
  });
  EXPECT_FALSE(decode_kv_event_batch(no_tag).ok());
}

TEST(RouterHttpUtil, ParsesReplicaAddressesAndMetrics) {
  auto e = parse_http_endpoint("http://127.0.0.1:8001/");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 8001);
  auto https = parse_http_endpoint("https://127.0.0.1:8101");
  ASSERT_FALSE(https.ok());
  EXPECT_NE(https.status().message().find("scheme 'https' is not http"), std::string::npos)
      << https.status().message();
  EXPECT_FALSE(parse_http_endpoint("http://host").ok());
  EXPECT_FALSE(parse_http_endpoint("http://host:99999").ok());
  EXPECT_FALSE(parse_http_endpoint("http://host:80/v1").ok());
  const ScrapedMetrics m = parse_vllm_metrics(
      "# HELP vllm:num_requests_waiting x\n"
      "vllm:num_requests_waiting{model_name=\"m\"} 3.0\n"
      "vllm:num_requests_running{model_name=\"m\"} 2.0\n"
      "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"
      "vllm:cache_config_info{block_size=\"16\",num_cpu_blocks=\"0\",num_gpu_blocks=\"512\"} 1.0\n"
      "vllm:num_requests_waiting_total 99\n");
  EXPECT_EQ(m.num_waiting, 3.0);
  EXPECT_EQ(m.num_running, 2.0);
  EXPECT_EQ(m.kv_cache_usage, 0.25);
  EXPECT_EQ(m.block_size, 16);
  EXPECT_EQ(m.num_gpu_blocks, 512);
  EXPECT_EQ(error_body(503, "a \"b\"\n"),
            "{\"error\": {\"message\": \"a \\\"b\\\"\\n\", \"type\": \"ServiceUnavailableError\", "
            "\"param\": null, \"code\": 503}}");
  // A client error without a type of its own is a BadRequestError, never an internal error.
  for (int status : {408, 431}) {
    EXPECT_NE(error_body(status, "m").find("\"type\": \"BadRequestError\""), std::string::npos)
        << status;
  }
  EXPECT_NE(error_body(500, "m").find("InternalServerError"), std::string::npos);
}

}  // namespace
}  // namespace torchtpu::router
