/* Plain-C test plugins with hand-written descriptors, one per build (TEST_CASE selects):
 *   1 abi major from the future   2 abi minor 0 (host test requires >= 1)   3 declines the host (NULL)
 *   4 descriptor too small        5 component with a NULL vtable            6 tool parser vtable too small
 *   7 a component of kind 2 (CACHE in ABI 1, retired in 2.0) */
#include <kiln/kiln_plugin.h>

static void* create(const kiln_parser_options* o, kiln_error* e) { (void)o; (void)e; return (void*)1; }
static void destroy(void* s) { (void)s; }
static kiln_status feed(void* s, kiln_str d, kiln_event_sink k, void* u, kiln_error* e) {
  (void)s; (void)d; (void)k; (void)u; (void)e; return KILN_OK;
}
static kiln_status finish(void* s, kiln_event_sink k, void* u, kiln_error* e) {
  (void)s; (void)k; (void)u; (void)e; return KILN_OK;
}
__attribute__((unused)) static const kiln_parser_vtable vt = {sizeof(kiln_parser_vtable), 0, create, destroy, feed, finish, {0}};
#if TEST_CASE == 6
static const kiln_parser_vtable vt_small = {8, 0, create, destroy, 0, 0, {0}};
#endif

static const kiln_component comps[] = {{sizeof(kiln_component),
#if TEST_CASE == 7
                                        2,
#else
                                        KILN_COMPONENT_TOOL_PARSER,
#endif
                                        "handmade",
#if TEST_CASE == 5
                                        "", 0,
#elif TEST_CASE == 6
                                        "", &vt_small,
#else
                                        "", &vt,
#endif
                                        0, {0}}};

static const kiln_plugin_descriptor desc = {
#if TEST_CASE == 4
    16,
#else
    sizeof(kiln_plugin_descriptor),
#endif
#if TEST_CASE == 1
    KILN_ABI_MAJOR + 1, 0,
#elif TEST_CASE == 2
    KILN_ABI_MAJOR, 0,
#else
    KILN_ABI_MAJOR, KILN_ABI_MINOR,
#endif
    "handmade", "0.0.1", 1, 0, comps, 0, {0}};

KILN_EXPORT const kiln_plugin_descriptor* kiln_plugin_get_descriptor(uint32_t major, uint32_t minor) {
  (void)major; (void)minor;
#if TEST_CASE == 3
  (void)desc;
  return 0;
#else
  return &desc;
#endif
}
