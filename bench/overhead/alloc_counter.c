/* Counts every allocation CPython makes through its object and memory allocators.
 *
 * tracemalloc reports the bytes that are alive, not how many allocations were made; this
 * library wraps PYMEM_DOMAIN_OBJ and PYMEM_DOMAIN_MEM (both called with the GIL held) and
 * counts malloc/calloc/realloc calls and the bytes they asked for. Loaded with ctypes.PyDLL
 * by alloc_counter.py; install() once, then read fg_counts() before and after a phase.
 */
#include <Python.h>

static PyMemAllocatorEx wrapped_obj, wrapped_mem;
static unsigned long long n_allocs, n_bytes;

static void *count_malloc(void *ctx, size_t size) {
    PyMemAllocatorEx *inner = (PyMemAllocatorEx *)ctx;
    n_allocs++;
    n_bytes += size;
    return inner->malloc(inner->ctx, size);
}

static void *count_calloc(void *ctx, size_t nelem, size_t elsize) {
    PyMemAllocatorEx *inner = (PyMemAllocatorEx *)ctx;
    n_allocs++;
    n_bytes += nelem * elsize;
    return inner->calloc(inner->ctx, nelem, elsize);
}

static void *count_realloc(void *ctx, void *ptr, size_t size) {
    PyMemAllocatorEx *inner = (PyMemAllocatorEx *)ctx;
    n_allocs++;
    n_bytes += size;
    return inner->realloc(inner->ctx, ptr, size);
}

static void count_free(void *ctx, void *ptr) {
    PyMemAllocatorEx *inner = (PyMemAllocatorEx *)ctx;
    inner->free(inner->ctx, ptr);
}

static void wrap(PyMemAllocatorDomain domain, PyMemAllocatorEx *saved) {
    PyMemAllocatorEx counting = {saved, count_malloc, count_calloc, count_realloc, count_free};
    PyMem_GetAllocator(domain, saved);
    PyMem_SetAllocator(domain, &counting);
}

int fg_install(void) {
    static int installed = 0;
    if (installed) return 0;
    installed = 1;
    wrap(PYMEM_DOMAIN_OBJ, &wrapped_obj);
    wrap(PYMEM_DOMAIN_MEM, &wrapped_mem);
    return 1;
}

void fg_counts(unsigned long long *allocs, unsigned long long *bytes) {
    *allocs = n_allocs;
    *bytes = n_bytes;
}
