/* proofgym: the few system calls the HOL Light fork server needs that OCaml's Unix lacks.
   Built at verifier start with ocamlmklib (gcc is a dependency of Debian's ocaml). */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <caml/mlvalues.h>
#include <caml/memory.h>
#include <caml/fail.h>

static void fail_errno(const char *what) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s: %s", what, strerror(errno));
  caml_failwith(buf);
}

/* 0 AS, 1 CPU, 2 NPROC, 3 FSIZE, 4 NOFILE, 5 CORE; the same soft and hard limit. */
value pg_setrlimit(value which, value amount) {
  static const int resources[] = {RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE};
  int i = Int_val(which);
  if (i < 0 || i > 5) caml_invalid_argument("pg_setrlimit");
  struct rlimit cur, lim;
  getrlimit(resources[i], &cur);
  lim.rlim_cur = lim.rlim_max = (rlim_t)Long_val(amount);
  if (cur.rlim_max != RLIM_INFINITY && lim.rlim_max > cur.rlim_max) lim.rlim_cur = lim.rlim_max = cur.rlim_max;
  if (setrlimit(resources[i], &lim) != 0) fail_errno("setrlimit");
  return Val_unit;
}

value pg_no_new_privs(value unit) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_errno("PR_SET_NO_NEW_PRIVS");
  return Val_unit;
}

/* The child gets SIGKILL when its parent (the zygote or the root) dies: no orphaned worker. */
value pg_die_with_parent(value unit) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail_errno("PR_SET_PDEATHSIG");
  return Val_unit;
}

/* Not dumpable: other processes of the same uid cannot ptrace it or open its /proc/PID/{fd,mem,environ}. */
value pg_set_dumpable(value on) {
  if (prctl(PR_SET_DUMPABLE, Bool_val(on) ? 1 : 0, 0, 0, 0) != 0) fail_errno("PR_SET_DUMPABLE");
  return Val_unit;
}

/* Close every descriptor >= 3 except [keep1] and [keep2]. */
value pg_close_fds_except(value keep1, value keep2) {
  long k1 = Long_val(keep1), k2 = Long_val(keep2);
  long top = sysconf(_SC_OPEN_MAX);
  if (top < 0 || top > 65536) top = 65536;
  for (long fd = 3; fd < top; fd++)
    if (fd != k1 && fd != k2) close((int)fd);
  return Val_unit;
}

#if defined(__x86_64__)
#define PG_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PG_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
                 BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))

/* A worker about to run a submission: no new processes, no programs, no files, no sockets, no signals
   to anyone, no ptrace. Returns false where seccomp is not available (other architectures). */
value pg_seccomp_worker(value unit) {
#ifdef PG_AUDIT_ARCH
  struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PG_AUDIT_ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#ifdef __x86_64__
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1), /* x32 ABI */
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    DENY(__NR_fork), DENY(__NR_vfork), DENY(__NR_open), DENY(__NR_creat), DENY(__NR_kill),
    DENY(__NR_tkill), DENY(__NR_unlink), DENY(__NR_rmdir), DENY(__NR_rename), DENY(__NR_mkdir), DENY(__NR_link),
    DENY(__NR_symlink), DENY(__NR_chmod), DENY(__NR_chown), DENY(__NR_lchown), DENY(__NR_mknod),
#endif
    DENY(__NR_clone), DENY(__NR_execve), DENY(__NR_execveat), DENY(__NR_openat), DENY(__NR_ptrace),
    DENY(__NR_process_vm_readv), DENY(__NR_process_vm_writev), DENY(__NR_socket), DENY(__NR_socketpair),
    DENY(__NR_connect), DENY(__NR_bind), DENY(__NR_tgkill), DENY(__NR_rt_sigqueueinfo),
    DENY(__NR_rt_tgsigqueueinfo), DENY(__NR_pidfd_open), DENY(__NR_pidfd_send_signal), DENY(__NR_pidfd_getfd),
    DENY(__NR_unshare), DENY(__NR_setns), DENY(__NR_mount), DENY(__NR_umount2), DENY(__NR_chroot),
    DENY(__NR_pivot_root), DENY(__NR_keyctl), DENY(__NR_add_key), DENY(__NR_request_key), DENY(__NR_bpf),
    DENY(__NR_perf_event_open), DENY(__NR_userfaultfd), DENY(__NR_personality), DENY(__NR_name_to_handle_at),
    DENY(__NR_open_by_handle_at), DENY(__NR_kcmp), DENY(__NR_mknodat), DENY(__NR_linkat), DENY(__NR_unlinkat),
    DENY(__NR_renameat), DENY(__NR_mkdirat), DENY(__NR_symlinkat), DENY(__NR_fchmodat), DENY(__NR_fchownat),
    DENY(__NR_truncate), DENY(__NR_ftruncate), DENY(__NR_setpriority), DENY(__NR_sched_setaffinity),
#ifdef __NR_clone3
    DENY(__NR_clone3),
#endif
#ifdef __NR_openat2
    DENY(__NR_openat2),
#endif
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = (unsigned short)(sizeof filter / sizeof filter[0]), .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_errno("PR_SET_NO_NEW_PRIVS");
  if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) fail_errno("seccomp");
  return Val_true;
#else
  return Val_false;
#endif
}
