// torchtpu._serve: Python glue over the serving engine core (csrc/serve). No logic lives
// here, and no torch: Status errors become Python exceptions (invalid argument ->
// ValueError, not found -> KeyError, anything else -> RuntimeError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>

#include "serve/scheduler.h"

namespace {

namespace py = pybind11;
using namespace torchtpu;
using serve::RequestStatus;
using serve::Scheduler;

[[noreturn]] void raise(const base::Status& status) {
  switch (status.code()) {
    case base::StatusCode::kInvalidArgument: throw py::value_error(status.message());
    case base::StatusCode::kNotFound: throw py::key_error(status.message());
    default: throw std::runtime_error(status.message());
  }
}

template <typename T>
T value_or_raise(base::StatusOr<T> result) {
  if (!result.ok()) raise(result.status());
  return std::move(result).value();
}

const serve::Request& known_request(const Scheduler& s, const std::string& id) {
  const serve::Request* req = s.find(id);
  if (req == nullptr) {
    raise(base::not_found("serve: no request with id '" + id +
                          "' (never added, or released after it finished)"));
  }
  return *req;
}

RequestStatus parse_finish_reason(const std::string& reason) {
  if (reason == "stop") return RequestStatus::kFinishedStopped;
  if (reason == "length") return RequestStatus::kFinishedLength;
  if (reason == "abort") return RequestStatus::kFinishedAborted;
  raise(base::invalid_argument("serve: finish: unknown reason '" + reason +
                               "' (expected one of: stop, length, abort)"));
}

std::string item_repr(const serve::ScheduledItem& item) {
  std::ostringstream os;
  os << "ScheduledItem(request_id='" << item.request_id << "', start_pos=" << item.start_pos
     << ", num_tokens=" << item.token_ids.size() << ", num_pages=" << item.page_ids.size()
     << ", sample=" << (item.sample ? "True" : "False")
     << ", num_output_tokens=" << item.num_output_tokens
     << ", num_draft_tokens=" << item.num_draft_tokens << ")";
  return os.str();
}

}  // namespace

PYBIND11_MODULE(_serve, m) {
  m.doc() = "torchtpu serving engine core: paged KV pages, radix prefix cache, scheduler";

  py::class_<serve::SchedulerConfig>(m, "SchedulerConfig")
      .def(py::init([](int32_t num_pages, int32_t page_size, int32_t max_num_seqs,
                       int32_t max_num_batched_tokens, int32_t max_model_len,
                       bool enable_prefix_cache, int32_t num_speculative_tokens,
                       int32_t prompt_lookup_min, int32_t prompt_lookup_max) {
             serve::SchedulerConfig c;
             c.num_pages = num_pages;
             c.page_size = page_size;
             c.max_num_seqs = max_num_seqs;
             c.max_num_batched_tokens = max_num_batched_tokens;
             c.max_model_len = max_model_len;
             c.enable_prefix_cache = enable_prefix_cache;
             c.num_speculative_tokens = num_speculative_tokens;
             c.prompt_lookup_min = prompt_lookup_min;
             c.prompt_lookup_max = prompt_lookup_max;
             base::Status valid = c.validate();
             if (!valid.ok()) raise(valid);
             return c;
           }),
           py::kw_only(), py::arg("num_pages") = 256, py::arg("page_size") = 16,
           py::arg("max_num_seqs") = 16, py::arg("max_num_batched_tokens") = 512,
           py::arg("max_model_len") = 2048, py::arg("enable_prefix_cache") = true,
           py::arg("num_speculative_tokens") = 0, py::arg("prompt_lookup_min") = 2,
           py::arg("prompt_lookup_max") = 4)
      .def_readonly("num_pages", &serve::SchedulerConfig::num_pages)
      .def_readonly("page_size", &serve::SchedulerConfig::page_size)
      .def_readonly("max_num_seqs", &serve::SchedulerConfig::max_num_seqs)
      .def_readonly("max_num_batched_tokens", &serve::SchedulerConfig::max_num_batched_tokens)
      .def_readonly("max_model_len", &serve::SchedulerConfig::max_model_len)
      .def_readonly("enable_prefix_cache", &serve::SchedulerConfig::enable_prefix_cache)
      .def_readonly("num_speculative_tokens", &serve::SchedulerConfig::num_speculative_tokens)
      .def_readonly("prompt_lookup_min", &serve::SchedulerConfig::prompt_lookup_min)
      .def_readonly("prompt_lookup_max", &serve::SchedulerConfig::prompt_lookup_max);

  py::class_<serve::ScheduledItem>(m, "ScheduledItem")
      .def_readonly("request_id", &serve::ScheduledItem::request_id)
      .def_readonly("token_ids", &serve::ScheduledItem::token_ids)
      .def_readonly("start_pos", &serve::ScheduledItem::start_pos)
      .def_readonly("page_ids", &serve::ScheduledItem::page_ids)
      .def_readonly("sample", &serve::ScheduledItem::sample)
      .def_readonly("num_output_tokens", &serve::ScheduledItem::num_output_tokens)
      .def_readonly("num_draft_tokens", &serve::ScheduledItem::num_draft_tokens)
      .def("__repr__", &item_repr);

  py::class_<serve::SchedulerOutput>(m, "SchedulerOutput")
      .def_readonly("items", &serve::SchedulerOutput::items)
      .def_readonly("preempted", &serve::SchedulerOutput::preempted)
      .def_readonly("num_scheduled_tokens", &serve::SchedulerOutput::num_scheduled_tokens)
      .def("__repr__", [](const serve::SchedulerOutput& o) {
        return "SchedulerOutput(num_items=" + std::to_string(o.items.size()) +
               ", num_scheduled_tokens=" + std::to_string(o.num_scheduled_tokens) +
               ", num_preempted=" + std::to_string(o.preempted.size()) + ")";
      });

  py::class_<Scheduler>(m, "Scheduler")
      .def(py::init([](const serve::SchedulerConfig& c) {
             return value_or_raise(Scheduler::create(c));
           }),
           py::arg("config"))
      .def(
          "add_request",
          [](Scheduler& s, const std::string& id, std::vector<serve::TokenId> prompt_token_ids,
             int32_t max_new_tokens, std::vector<serve::TokenId> stop_token_ids,
             bool ignore_eos, bool speculative) {
            base::Status st = s.add_request(id, std::move(prompt_token_ids), max_new_tokens,
                                            std::move(stop_token_ids), ignore_eos, speculative);
            if (!st.ok()) raise(st);
          },
          py::arg("request_id"), py::kw_only(), py::arg("prompt_token_ids"),
          py::arg("max_new_tokens"), py::arg("stop_token_ids") = std::vector<serve::TokenId>{},
          py::arg("ignore_eos") = false, py::arg("speculative") = true)
      .def("abort", &Scheduler::abort, py::arg("request_id"))
      .def(
          "finish",
          [](Scheduler& s, const std::string& id, const std::string& reason) {
            return s.finish(id, parse_finish_reason(reason));
          },
          py::arg("request_id"), py::arg("reason") = "stop")
      .def("schedule", [](Scheduler& s) { return value_or_raise(s.schedule()); })
      .def(
          "update",
          // {request id: token, or [accepted drafts..., token]} (Scheduler::update_tokens).
          [](Scheduler& s, const py::dict& sampled) {
            std::unordered_map<std::string, std::vector<serve::TokenId>> tokens;
            for (const auto& [key, value] : sampled) {
              auto id = key.cast<std::string>();
              if (py::isinstance<py::int_>(value)) {
                tokens[id] = {value.cast<serve::TokenId>()};
              } else {
                tokens[id] = value.cast<std::vector<serve::TokenId>>();
              }
            }
            return value_or_raise(s.update_tokens(tokens));
          },
          py::arg("sampled"))
      .def("has_unfinished", &Scheduler::has_unfinished)
      .def(
          "request_output_ids",
          [](const Scheduler& s, const std::string& id) {
            return known_request(s, id).output_token_ids;
          },
          py::arg("request_id"))
      .def(
          "request_num_output_tokens",
          [](const Scheduler& s, const std::string& id) {
            return known_request(s, id).num_output_tokens();
          },
          py::arg("request_id"))
      .def(
          "request_status",
          [](const Scheduler& s, const std::string& id) {
            return std::string(serve::request_status_name(known_request(s, id).status));
          },
          py::arg("request_id"))
      .def(
          "request_num_cached_tokens",
          [](const Scheduler& s, const std::string& id) {
            return known_request(s, id).num_cached_tokens;
          },
          py::arg("request_id"))
      .def(
          "request_timeline",
          [](const Scheduler& s, const std::string& id) {
            const serve::Request& r = known_request(s, id);
            py::dict d;
            d["queued_step"] = r.queued_step;
            d["prefill_chunks"] = r.prefill_chunks;  // [(step, tokens)]
            d["first_token_step"] = r.first_token_step;
            d["num_cached_tokens"] = r.num_cached_tokens;
            d["num_preemptions"] = r.num_preemptions;
            return d;
          },
          py::arg("request_id"))
      .def("release_request", &Scheduler::release, py::arg("request_id"))
      .def("reset_prefix_cache", [](Scheduler& s) { s.reset_prefix_cache(); })
      .def("enable_kv_events", &Scheduler::enable_kv_events)
      .def(
          "take_kv_events",
          [](Scheduler& s) {
            // (type, block_hashes, parent_block_hash | None, token_ids, block_size): the
            // fields of vLLM's events; the publisher adds the rest.
            py::list out;
            for (const serve::KvEvent& e : s.take_kv_events()) {
              py::object parent = e.parent_block_hash ? py::object(py::int_(*e.parent_block_hash))
                                                      : py::object(py::none());
              out.append(py::make_tuple(serve::kv_event_kind_name(e.kind), e.block_hashes, parent,
                                        e.token_ids, e.block_size));
            }
            return out;
          })
      .def_property_readonly("config", &Scheduler::config)
      .def_property_readonly("num_free_pages", &Scheduler::num_free_pages)
      .def_property_readonly("num_total_pages", &Scheduler::num_total_pages)
      .def_property_readonly("num_cached_pages", &Scheduler::num_cached_pages)
      .def_property_readonly("num_running", &Scheduler::num_running)
      .def_property_readonly("num_waiting", &Scheduler::num_waiting)
      .def_property_readonly("kv_cache_usage", &Scheduler::kv_cache_usage)
      .def_property_readonly("prefix_cache_queries", &Scheduler::prefix_cache_queries)
      .def_property_readonly("prefix_cache_hits", &Scheduler::prefix_cache_hits)
      .def_property_readonly("num_preemptions", &Scheduler::num_preemptions)
      .def_property_readonly("num_steps", &Scheduler::num_steps)
      .def_property_readonly("token_clock", &Scheduler::token_clock);
}
