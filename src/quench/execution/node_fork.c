/* fork(2) for node: the native half of quench's JavaScript zygote (node_zygote.js).
 *
 * Built by quench.execution.toolchains into the shared build cache with `cc -shared`, against
 * Node-API and libuv symbols that the node binary exports: the prototypes are declared here, so no
 * node headers are needed. Every function is synchronous and called from the zygote's one thread.
 *
 * Node marks V8's heap MADV_DONTFORK (a child of fork-and-exec never touches it), so a forked
 * child would fault on its first heap access: `fork` undoes that on every mapping first. The child
 * gets a fresh libuv loop (uv_loop_fork) and must leave through `exit` (_exit): node's own exit
 * joins platform threads that exist only in the zygote.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
struct uv_loop_s;

extern napi_status napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
extern napi_status napi_set_named_property(napi_env, napi_value, const char *, napi_value);
extern napi_status napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
extern napi_status napi_get_value_int32(napi_env, napi_value, int32_t *);
extern napi_status napi_get_value_int64(napi_env, napi_value, int64_t *);
extern napi_status napi_create_int32(napi_env, int32_t, napi_value *);
extern napi_status napi_get_uv_event_loop(napi_env, struct uv_loop_s **);
extern int uv_loop_fork(struct uv_loop_s *);
extern void uv_update_time(struct uv_loop_s *);

#define MAX_ARGS 3

static pid_t zygote_pid;       /* the process that loaded this library: any other is a forked child */
static int teardown_code = 1;  /* what a child exits with when node's teardown reaches a thread join */

__attribute__((constructor)) static void remember_zygote(void) { zygote_pid = getpid(); }

/* Preloaded (LD_PRELOAD), this replaces libc's pthread_join for node. A child's platform threads
 * were never copied, so node's teardown would wait for them forever (or fault): a child that gets
 * there, after node has printed an uncaught exception, exits with `teardown_code` instead. */
int pthread_join(pthread_t thread, void **result) {
    static int (*join)(pthread_t, void **);
    if (getpid() != zygote_pid) _exit(teardown_code);
    if (join == NULL) join = (int (*)(pthread_t, void **))dlsym(RTLD_NEXT, "pthread_join");
    return join(thread, result);
}

/* The first `count` arguments as integers (missing ones are 0). */
static void int_args(napi_env env, napi_callback_info info, int64_t *out, size_t count) {
    napi_value argv[MAX_ARGS];
    size_t argc = MAX_ARGS;
    napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
    for (size_t i = 0; i < count; i++) {
        out[i] = 0;
        if (i < argc) napi_get_value_int64(env, argv[i], &out[i]);
    }
}

static napi_value int_value(napi_env env, int32_t value) {
    napi_value out;
    napi_create_int32(env, value, &out);
    return out;
}

/* Every mapping forkable again (V8's heap is MADV_DONTFORK). */
static void make_forkable(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long low, high;
    if (maps == NULL) return;
    while (fgets(line, sizeof line, maps) != NULL)
        if (sscanf(line, "%lx-%lx", &low, &high) == 2) madvise((void *)low, high - low, MADV_DOFORK);
    fclose(maps);
}

/* fork() -> the child's pid in the zygote, 0 in the child, -errno on failure. */
static napi_value js_fork(napi_env env, napi_callback_info info) {
    (void)info;
    make_forkable();
    pid_t pid = fork();
    if (pid == 0) {
        struct uv_loop_s *loop = NULL;
        if (napi_get_uv_event_loop(env, &loop) == 0 && loop != NULL) {
            uv_loop_fork(loop);
            uv_update_time(loop); /* timers the program sets count from now, not from the zygote's start */
        }
    }
    return int_value(env, pid < 0 ? -errno : pid);
}

/* wait(pid) -> the raw wait status of the child `pid`, -errno on failure. */
static napi_value js_wait(napi_env env, napi_callback_info info) {
    int64_t pid;
    int status = 0;
    int_args(env, info, &pid, 1);
    while (waitpid((pid_t)pid, &status, 0) < 0)
        if (errno != EINTR) return int_value(env, -errno);
    return int_value(env, status);
}

/* exit(code): _exit, past node's teardown. */
static napi_value js_exit(napi_env env, napi_callback_info info) {
    int64_t code;
    int_args(env, info, &code, 1);
    _exit((int)(code & 0xff));
}

/* exitAtTeardown(code): the status of a child whose teardown reaches a thread join. */
static napi_value js_exit_at_teardown(napi_env env, napi_callback_info info) {
    int64_t code;
    int_args(env, info, &code, 1);
    teardown_code = (int)(code & 0xff);
    return int_value(env, 0);
}

/* setsid() -> 0 or -errno. */
static napi_value js_setsid(napi_env env, napi_callback_info info) {
    (void)info;
    return int_value(env, setsid() < 0 ? -errno : 0);
}

/* limit(resource, soft, hard) -> 0 or -errno; a negative bound means unlimited. */
static napi_value js_limit(napi_env env, napi_callback_info info) {
    int64_t args[3];
    int_args(env, info, args, 3);
    struct rlimit bounds = {args[1] < 0 ? RLIM_INFINITY : (rlim_t)args[1], args[2] < 0 ? RLIM_INFINITY : (rlim_t)args[2]};
    return int_value(env, setrlimit((int)args[0], &bounds) < 0 ? -errno : 0);
}

/* dup2(from, to) -> 0 or -errno; `to` is left inheritable. */
static napi_value js_dup2(napi_env env, napi_callback_info info) {
    int64_t fds[2];
    int_args(env, info, fds, 2);
    return int_value(env, dup2((int)fds[0], (int)fds[1]) < 0 ? -errno : 0);
}

/* dumpable(flag) -> 0 or -errno: a zygote that is not dumpable cannot be traced by the programs it forks. */
static napi_value js_dumpable(napi_env env, napi_callback_info info) {
    int64_t flag;
    int_args(env, info, &flag, 1);
    return int_value(env, prctl(PR_SET_DUMPABLE, flag ? 1 : 0, 0, 0, 0) < 0 ? -errno : 0);
}

static void export_function(napi_env env, napi_value exports, const char *name, napi_callback function) {
    napi_value value;
    napi_create_function(env, name, (size_t)-1, function, NULL, &value);
    napi_set_named_property(env, exports, name, value);
}

__attribute__((visibility("default"))) int32_t node_api_module_get_api_version_v1(void) { return 8; }

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
    export_function(env, exports, "fork", js_fork);
    export_function(env, exports, "wait", js_wait);
    export_function(env, exports, "exit", js_exit);
    export_function(env, exports, "exitAtTeardown", js_exit_at_teardown);
    export_function(env, exports, "setsid", js_setsid);
    export_function(env, exports, "limit", js_limit);
    export_function(env, exports, "dup2", js_dup2);
    export_function(env, exports, "dumpable", js_dumpable);
    return exports;
}
