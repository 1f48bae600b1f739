/* Counts heap allocations made by one thread, for the dispatch budget test.
 *
 * Preloaded (LD_PRELOAD) into a test process on glibc: every allocation function forwards
 * to glibc's own (__libc_*), counting calls made by a thread between
 * alloc_counter_start() and alloc_counter_stop(). Other threads (the plugin's workers)
 * are not counted: the budget is the dispatching thread's work. */
#include <errno.h>
#include <stddef.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

static __thread int counting;
static __thread long count;

void* malloc(size_t n) {
  count += counting;
  return __libc_malloc(n);
}
void* calloc(size_t k, size_t n) {
  count += counting;
  return __libc_calloc(k, n);
}
void* realloc(void* p, size_t n) {
  count += counting;
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) {
  count += counting;
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  count += counting;
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  count += counting;
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(align, n);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }

void alloc_counter_start(void) {
  count = 0;
  counting = 1;
}
long alloc_counter_stop(void) {
  counting = 0;
  return count;
}
