(* proofgym: OCaml side of pgsys.c (see there). *)
external setrlimit : int -> int -> unit = "pg_setrlimit"
external no_new_privs : unit -> unit = "pg_no_new_privs"
external die_with_parent : unit -> unit = "pg_die_with_parent"
external set_dumpable : bool -> unit = "pg_set_dumpable"
external close_fds_except : int -> int -> unit = "pg_close_fds_except"
external seccomp_worker : unit -> bool = "pg_seccomp_worker"
