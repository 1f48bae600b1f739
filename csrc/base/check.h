// TORCHTPU_CHECK: for our own invariants only. Anything a user, a model or a device can
// cause is a Status instead. A failed check prints the condition and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TORCHTPU_CHECK(cond, msg)                                                    \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "torchtpu internal check failed at %s:%d: %s (%s)\n",     \
                   __FILE__, __LINE__, #cond, msg);                                  \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
