#include "router/kv_event_decoder.h"

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

#include <string>

namespace torchtpu::router {

namespace {

using msgpack::object;
using serve::BlockHash;
using serve::KvEvent;
using serve::KvEventKind;

struct DecodeError {
  std::string what;
};

[[noreturn]] void fail(const std::string& what) { throw DecodeError{what}; }

std::string_view as_str(const object& o, const char* field) {
  if (o.type != msgpack::type::STR) fail(std::string(field) + " is not a string");
  return {o.via.str.ptr, o.via.str.size};
}

uint64_t as_u64(const object& o, const char* field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  // vLLM's hashes may be signed (Python's hash()) or bytes (sha256): keep 64 bits of either.
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<uint64_t>(o.via.i64);
  if (o.type == msgpack::type::BIN && o.via.bin.size > 0) {
    uint64_t v = 0;
    const uint32_t n = o.via.bin.size;
    for (uint32_t i = n > 8 ? n - 8 : 0; i < n; ++i) {
      v = (v << 8) | static_cast<uint8_t>(o.via.bin.ptr[i]);
    }
    return v;
  }
  fail(std::string(field) + " is not an integer");
}

double as_f64(const object& o, const char* field) {
  if (o.type == msgpack::type::FLOAT64 || o.type == msgpack::type::FLOAT32) return o.via.f64;
  if (o.type == msgpack::type::POSITIVE_INTEGER) return static_cast<double>(o.via.u64);
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<double>(o.via.i64);
  fail(std::string(field) + " is not a number");
}

const object* array_items(const object& o, const char* field, uint32_t* size) {
  if (o.type != msgpack::type::ARRAY) fail(std::string(field) + " is not an array");
  *size = o.via.array.size;
  return o.via.array.ptr;
}

std::vector<BlockHash> hashes(const object& o) {
  uint32_t n = 0;
  const object* items = array_items(o, "block_hashes", &n);
  std::vector<BlockHash> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(as_u64(items[i], "a block hash"));
  return out;
}

std::vector<serve::TokenId> token_ids(const object& o) {
  uint32_t n = 0;
  const object* items = array_items(o, "token_ids", &n);
  std::vector<serve::TokenId> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back(static_cast<serve::TokenId>(as_u64(items[i], "a token id")));
  }
  return out;
}

// The event's fields by name, from a map or (older vLLM) a positional array.
struct Fields {
  std::string_view type;
  const object* block_hashes = nullptr;
  const object* parent = nullptr;
  const object* tokens = nullptr;
  const object* block_size = nullptr;
};

Fields fields_of(const object& e) {
  Fields f;
  if (e.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < e.via.map.size; ++i) {
      const auto& kv = e.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) continue;
      std::string_view k(kv.key.via.str.ptr, kv.key.via.str.size);
      if (k == "type") f.type = as_str(kv.val, "type");
      else if (k == "block_hashes") f.block_hashes = &kv.val;
      else if (k == "parent_block_hash") f.parent = &kv.val;
      else if (k == "token_ids") f.tokens = &kv.val;
      else if (k == "block_size") f.block_size = &kv.val;
    }
    if (f.type.empty()) fail("an event map has no \"type\"");
    return f;
  }
  uint32_t n = 0;
  const object* items = array_items(e, "an event", &n);
  if (n == 0) fail("an event array is empty (no tag)");
  f.type = as_str(items[0], "an event's tag");
  if (f.type == "BlockStored") {
    if (n < 5) fail("a BlockStored array has " + std::to_string(n) + " fields (expected >= 5)");
    f.block_hashes = &items[1];
    f.parent = &items[2];
    f.tokens = &items[3];
    f.block_size = &items[4];
  } else if (f.type == "BlockRemoved") {
    if (n < 2) fail("a BlockRemoved array has no block_hashes");
    f.block_hashes = &items[1];
  }
  return f;
}

}  // namespace

base::StatusOr<DecodedBatch> decode_kv_event_batch(std::string_view payload) {
  try {
    // Bounds keep a hostile payload from allocating without limit.
    const msgpack::unpack_limit limit(/*array=*/1u << 22, /*map=*/1u << 10, /*str=*/1u << 16,
                                      /*bin=*/1u << 16, /*ext=*/0, /*depth=*/8);
    msgpack::object_handle handle =
        msgpack::unpack(payload.data(), payload.size(), nullptr, nullptr, limit);
    const object& batch = handle.get();
    const object* ts = nullptr;
    const object* events = nullptr;
    if (batch.type == msgpack::type::ARRAY) {
      if (batch.via.array.size < 2) fail("the batch array has fewer than 2 fields");
      ts = &batch.via.array.ptr[0];
      events = &batch.via.array.ptr[1];
    } else if (batch.type == msgpack::type::MAP) {
      for (uint32_t i = 0; i < batch.via.map.size; ++i) {
        const auto& kv = batch.via.map.ptr[i];
        if (kv.key.type != msgpack::type::STR) continue;
        std::string_view k(kv.key.via.str.ptr, kv.key.via.str.size);
        if (k == "ts") ts = &kv.val;
        if (k == "events") events = &kv.val;
      }
      if (ts == nullptr || events == nullptr) fail("the batch map lacks ts or events");
    } else {
      fail("the batch is neither an array nor a map");
    }
    DecodedBatch out;
    out.ts = as_f64(*ts, "ts");
    uint32_t n = 0;
    const object* items = array_items(*events, "events", &n);
    for (uint32_t i = 0; i < n; ++i) {
      Fields f = fields_of(items[i]);
      if (f.type == "BlockStored") {
        if (!f.block_hashes || !f.tokens || !f.block_size) fail("a BlockStored lacks fields");
        std::optional<BlockHash> parent;
        if (f.parent && f.parent->type != msgpack::type::NIL) {
          parent = as_u64(*f.parent, "parent_block_hash");
        }
        const auto block_size = static_cast<int32_t>(as_u64(*f.block_size, "block_size"));
        out.events.push_back(KvEvent::stored(hashes(*f.block_hashes), parent,
                                             token_ids(*f.tokens), block_size));
      } else if (f.type == "BlockRemoved") {
        if (!f.block_hashes) fail("a BlockRemoved lacks block_hashes");
        out.events.push_back(KvEvent::removed(hashes(*f.block_hashes)));
      } else if (f.type == "AllBlocksCleared") {
        out.events.push_back(KvEvent::cleared());
      } else {
        ++out.num_ignored_events;
      }
    }
    return out;
  } catch (const DecodeError& e) {
    return base::invalid_argument("router: KV event batch: " + e.what);
  } catch (const std::exception& e) {
    return base::invalid_argument(std::string("router: KV event batch is not valid msgpack: ") +
                                  e.what());
  }
}

}  // namespace torchtpu::router
