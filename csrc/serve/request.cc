#include "serve/request.h"

#include <algorithm>

namespace torchtpu::serve {

const char* request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinishedStopped: return "finished_stopped";
    case RequestStatus::kFinishedLength: return "finished_length";
    case RequestStatus::kFinishedAborted: return "finished_aborted";
  }
  return "unknown";
}

const char* finish_reason(RequestStatus status) {
  switch (status) {
    case RequestStatus::kFinishedStopped: return "stop";
    case RequestStatus::kFinishedLength: return "length";
    case RequestStatus::kFinishedAborted: return "abort";
    default: return "";
  }
}

bool is_finished(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted;
}

std::vector<TokenId> Request::all_token_ids() const {
  std::vector<TokenId> all;
  all.reserve(num_tokens());
  all.insert(all.end(), prompt_token_ids.begin(), prompt_token_ids.end());
  all.insert(all.end(), output_token_ids.begin(), output_token_ids.end());
  return all;
}

bool Request::append_and_check_stop(TokenId token) {
  output_token_ids.push_back(token);
  // Like vLLM, the stop token stays in the output; the caller decides whether to show it.
  if (!ignore_eos &&
      std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end()) {
    status = RequestStatus::kFinishedStopped;
    return true;
  }
  if (num_output_tokens() >= max_new_tokens) {
    status = RequestStatus::kFinishedLength;
    return true;
  }
  return false;
}

}  // namespace torchtpu::serve
