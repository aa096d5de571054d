(* proofgym: the HOL Light fork server (plain OCaml syntax; parsed before camlp5 is loaded).

   Process tree, all inside one bubblewrap sandbox:

     root     loads HOL Light and the base context once, then serves frames on stdin/stdout
     zygote   forked from root per problem context; loads the context, then forks workers
     worker   forked from a zygote per attempt: parses the goal (trusted text) first, checks
              the submission's parse tree and typed tree against the whitelist, drops to its
              own uid, installs seccomp, runs the tactic, and writes the verdict on its own
              pipe. Its stdout/stderr go to another pipe that is only ever shown as messages.

   The zygote (the worker's parent) kills the worker at its deadline from outside (SIGKILL)
   and watches its memory. Frames are "TAG ID N\n" then N fields "LEN\n<bytes>".
   The Python side writes PG_CONFIG_* values above this text. *)

#directory "+compiler-libs";;
#load "unix.cma";;
#directory PG_CONFIG_workdir;;
#load "pgsys.cma";;

let pg_t0 = Unix.gettimeofday ()
let pg_protocol_out = Unix.dup Unix.stdout
let () = Unix.dup2 Unix.stderr Unix.stdout  (* everything HOL prints goes to stderr *)

let pg_log fmt = Printf.ksprintf (fun s -> prerr_string ("[proofgym] " ^ s ^ "\n"); flush stderr) fmt

(* ------------------------------------------------------------------------------------------ *)
(* frames                                                                                      *)

let pg_write_all fd s =
  let b = Bytes.unsafe_of_string s in
  let n = Bytes.length b in
  let rec go off =
    if off < n then
      let k = try Unix.write fd b off (n - off) with Unix.Unix_error (Unix.EINTR, _, _) -> 0 in
      go (off + k)
  in
  go 0

let pg_frame tag id fields =
  let b = Buffer.create 256 in
  Buffer.add_string b (Printf.sprintf "%s %s %d\n" tag id (List.length fields));
  List.iter (fun f -> Buffer.add_string b (Printf.sprintf "%d\n" (String.length f)); Buffer.add_string b f) fields;
  Buffer.contents b

(* A small frame goes out in one write, built in the minor heap. A large one (a failure's reasons, a
   worker's output, goals) is written piece by piece: building it would allocate it twice more in the
   major heap, which the root and the zygotes never collect (pg_quiet_gc), so every large verdict they
   pass on would stay, about 10 KB in the root and 20 KB in the zygote for a 3 KB reason. *)
let pg_send fd tag id fields =
  if List.fold_left (fun n f -> n + String.length f + 8) 24 fields < 900 then pg_write_all fd (pg_frame tag id fields)
  else begin
    pg_write_all fd (Printf.sprintf "%s %s %d\n" tag id (List.length fields));
    List.iter (fun f -> pg_write_all fd (string_of_int (String.length f) ^ "\n"); pg_write_all fd f) fields
  end

(* A buffered blocking reader of frames from a trusted peer. *)
type pg_reader = { rfd : Unix.file_descr; rbuf : Buffer.t; mutable rpos : int; mutable eof : bool }

let pg_reader fd = { rfd = fd; rbuf = Buffer.create 65536; rpos = 0; eof = false }

(* One buffer for every read: the root and the zygotes should not allocate (see pg_quiet_gc). *)
let pg_chunk = Bytes.create 65536

let pg_fill r =
  let chunk = pg_chunk in
  let k = try Unix.read r.rfd chunk 0 65536 with Unix.Unix_error (Unix.EINTR, _, _) -> -1 in
  if k = 0 then r.eof <- true else if k > 0 then Buffer.add_subbytes r.rbuf chunk 0 k

let pg_compact r =
  if r.rpos > 1048576 || r.rpos = Buffer.length r.rbuf then begin
    let rest = Buffer.sub r.rbuf r.rpos (Buffer.length r.rbuf - r.rpos) in
    Buffer.clear r.rbuf; Buffer.add_string r.rbuf rest; r.rpos <- 0
  end

exception Pg_eof

let rec pg_read_line r =
  let rec find i = if i >= Buffer.length r.rbuf then -1 else if Buffer.nth r.rbuf i = '\n' then i else find (i + 1) in
  let i = find r.rpos in
  if i >= 0 then begin
    let line = Buffer.sub r.rbuf r.rpos (i - r.rpos) in
    r.rpos <- i + 1; line
  end else if r.eof then raise Pg_eof
  else (pg_fill r; pg_read_line r)

let rec pg_read_exact r n =
  if Buffer.length r.rbuf - r.rpos >= n then begin
    let s = Buffer.sub r.rbuf r.rpos n in
    r.rpos <- r.rpos + n; s
  end else if r.eof then raise Pg_eof
  else (pg_fill r; pg_read_exact r n)

let pg_read_frame r =
  let header = pg_read_line r in
  match String.split_on_char ' ' header with
  | [tag; id; n] ->
      let fields = List.init (int_of_string n) (fun _ -> pg_read_exact r (int_of_string (pg_read_line r))) in
      pg_compact r; (tag, id, fields)
  | _ -> failwith ("bad frame header: " ^ String.escaped header)

(* Whether a complete frame is already buffered (so select() must not wait for more bytes). *)
let pg_frame_buffered r =
  let s = Buffer.sub r.rbuf r.rpos (Buffer.length r.rbuf - r.rpos) in
  try
    let i = String.index s '\n' in
    match String.split_on_char ' ' (String.sub s 0 i) with
    | [_; _; n] ->
        let pos = ref (i + 1) in
        for _ = 1 to int_of_string n do
          let j = String.index_from s !pos '\n' in
          let len = int_of_string (String.sub s !pos (j - !pos)) in
          if j + 1 + len > String.length s then raise Not_found;
          pos := j + 1 + len
        done;
        true
    | _ -> true
  with Not_found | Invalid_argument _ -> false

(* ------------------------------------------------------------------------------------------ *)
(* loading HOL Light: a half-loaded context must never serve                                   *)

let pg_loaded_files : string list ref = ref []   (* every file HOL's use_file loaded, newest first *)

let pg_before_file = ref (fun () -> ())   (* set below: keeps the recording parser installed *)

let pg_note_file s =
  !pg_before_file ();
  pg_loaded_files := s :: !pg_loaded_files;
  pg_log "loading %s (%.0f s)" s (Unix.gettimeofday () -. pg_t0)

let pg_read_file path =   (* to EOF: /proc files report a length of 0 *)
  let ic = open_in_bin path in
  let b = Buffer.create 65536 and chunk = Bytes.create 65536 in
  let rec go () = let k = input ic chunk 0 65536 in if k > 0 then (Buffer.add_subbytes b chunk 0 k; go ()) in
  go (); close_in ic; Buffer.contents b

let pg_write_file path s =
  let oc = open_out_gen [Open_wronly; Open_creat; Open_trunc; Open_binary] 0o600 path in
  output_string oc s; close_out oc

let pg_find_sub s sub from =
  let n = String.length s and m = String.length sub in
  let rec go i = if i + m > n then -1 else if String.sub s i m = sub then i else go (i + 1) in
  go from

(* Debian's hol.ml (20230128) prints "Error in included file" and carries on; newer ones have
   use_file_raise_failure. Either way we make a failed load raise, and note every file loaded. *)
let pg_raising_use_file =
  "let use_file_raise_failure = ref true;;\n\
   let use_file s =\n\
  \  pg_note_file s;\n\
  \  if Toploop.use_file Format.std_formatter s then ()\n\
  \  else if !use_file_raise_failure then failwith (\"Error in included file \" ^ s)\n\
  \  else (Format.print_string (\"Error in included file \" ^ s); Format.print_newline ());;\n"

let pg_patch_hol_ml text =
  let start = pg_find_sub text "let use_file s =" 0 in
  if start >= 0 then begin
    let stop = pg_find_sub text ";;" start in
    if stop < 0 then failwith "hol.ml: cannot find the end of use_file";
    String.sub text 0 start ^ pg_raising_use_file ^ String.sub text (stop + 2) (String.length text - stop - 2)
  end else begin
    let hook = "file_loader := fun s -> Toploop.use_file Format.std_formatter s;;" in
    let i = pg_find_sub text hook 0 in
    if i < 0 then failwith "hol.ml: neither a use_file definition nor a Hol_loader file_loader; unsupported layout";
    String.sub text 0 i
    ^ "file_loader := (fun s -> pg_note_file s; Toploop.use_file Format.std_formatter s);;\n\
       use_file_raise_failure := true;;\n"
    ^ String.sub text (i + String.length hook) (String.length text - i - String.length hook)
  end

let pg_use path =
  if not (Toploop.use_file Format.std_formatter path) then failwith ("loading " ^ path ^ " failed")

(* ------------------------------------------------------------------------------------------ *)
(* the policy: three classes, in this one place                                                *)
(*                                                                                              *)
(* Every name, module and construct a submission uses is in exactly one class, and the class    *)
(* decides the verdict:                                                                         *)
(*   1. CHEATING: it can make an unproved statement pass, or reach what can (a hole, the kernel's  *)
(*      back doors, memory below the type system, I/O, the toplevel, a forged verdict). Each     *)
(*      entry below says what it could do; that text is the verdict's reason.                    *)
(*   2. allowed: HOL Light's own definitions that the taint analysis leaves clean (tactics, rules, *)
(*      conversions, theorems), the submission's own bindings, and the harmless Stdlib below:    *)
(*      printing progress, formatting a failure message, memoising in a table or a ref.          *)
(*   3. anything else (unlisted, unknown): ERROR, reward 0, with feedback that says what is       *)
(*      allowed. Fail closed means no reward, never -1.                                           *)
(* Adding to class 1 is a decision that needs its reason; an entry without one belongs in 3.      *)

(* Why printing is harmless: a worker's stdout and stderr are one pipe whose bytes are only ever shown as
   messages; the verdict goes out on another pipe whose descriptor no submission can name (no channel can
   be made on it without Unix or Obj, both class 1), so no output can forge a verdict. *)

(* Class 1, modules: any value of these (as M.x, Stdlib.M.x or Stdlib__M.x) is CHEATING. *)
let pg_cheat_modules = [
  ["Obj"; "CamlinternalOO"; "CamlinternalMod"; "CamlinternalLazy"],
  "reads and writes memory below the type system (Obj.magic makes a theorem of any value)";
  ["Marshal"], "rebuilds any value from bytes, a theorem included";
  ["Sys"], "runs commands and reads or changes files, signals and the environment (I/O outside the proof)";
  ["Unix"; "UnixLabels"], "the process, files, sockets and signals (I/O outside the proof)";
  ["Toploop"; "Topdirs"; "Topmain"; "Env"; "Typemod"; "Typecore"; "Ctype"; "Compmisc"; "Symtable"; "Dynlink";
   "Dll"; "Meta"],
  "the toplevel and the compiler: runs or loads code that skips these checks, or rebinds the names they use";
  ["In_channel"; "Out_channel"; "Scanf"], "opens files and channels (I/O outside the proof)";
  ["Gc"], "finalisers and alarms run code inside the checks after the proof, which can turn their verdict into an error";
  ["Callback"], "hands values to C code, outside the type system";
  ["Pgsys"], "proofgym's own sandbox system calls"]

(* Class 1, single values: a qualified name counts by its last component too (Hol.mk_thm is mk_thm). *)
let pg_extension_names =
  ["new_type"; "new_constant"; "new_basic_definition"; "new_basic_type_definition"; "new_axiom"; "mk_thm"]

let pg_cheat_names = [
  pg_extension_names,
  "a back door of the kernel: states a theorem without proof or extends the theory (fusion.ml)";
  ["CHEAT_TAC"], "proves any goal without a proof";
  ["define"; "define_type"; "define_type_raw"; "new_inductive_definition"],
  "extends the theory (reaches new_basic_definition / new_basic_type_definition)";
  ["the_axioms"; "the_definitions"], "the kernel's record of axioms and definitions, which the check after the proof reads";
  ["open_in"; "open_in_bin"; "open_in_gen"; "open_out"; "open_out_bin"; "open_out_gen"; "close_in"; "close_in_noerr";
   "input"; "input_line"; "input_char"; "input_byte"; "input_binary_int"; "input_value"; "really_input";
   "really_input_string"; "seek_in"; "pos_in"; "in_channel_length"; "set_binary_mode_in"; "read_line"; "read_int";
   "read_int_opt"; "read_float"; "read_float_opt"; "stdin"; "file_of_string"; "string_of_file"; "help"; "temp_path"],
  "opens or reads files or input (I/O outside the proof)";
  ["close_out"; "close_out_noerr"],
  "closes an output channel: with its stdout closed, a worker's last writes fail around its verdict";
  ["exit"], "ends the worker before the checks after the proof: a cheat would read as a dead worker";
  ["at_exit"; "do_at_exit"], "runs code when the worker exits, after the checks";
  ["exec"; "load"; "loads"; "loadt"; "needs"; "use_file"; "load_on_path"; "file_on_path"; "hol_expand_directory";
   "load_path"; "loaded_files"; "hol_dir"; "use_file_raise_failure"; "file_loader"; "update_database";
   "pg_note_file"],
  "the loader: reads files and runs code outside the checked expression"]

(* Class 1, single qualified values of modules that are otherwise harmless (or class 3). *)
let pg_cheat_qualified = [
  ["Filename.temp_file"; "Filename.open_temp_file"; "Digest.file"; "Digest.channel"],
  "file I/O outside the proof";
  ["Printexc.set_uncaught_exception_handler"], "runs code when the worker dies, after the checks"]

(* Why a proofgym name is class 1: pg_* values and Pg_* exceptions are the server's own (the verdict
   closures, the received tactic, the exception that carries a verdict out of the attempt). *)
let pg_own_reason = "proofgym's own verdict machinery (it could forge a verdict)"

(* Class 3 by decision (ERROR, with this text): they cannot make an unproved statement pass (the goal is
   parsed and the checks are bound before the submission runs; every theorem still comes from the
   kernel), but a tactic has no business with them. *)
let pg_error_names = [
  ["parse_as_infix"; "parse_as_prefix"; "parse_as_binder"; "unparse_as_infix"; "unparse_as_prefix";
   "unparse_as_binder"; "override_interface"; "overload_interface"; "reduce_interface"; "remove_interface";
   "the_interface"; "make_overloadable"; "prioritize_overload"; "prioritize_num"; "prioritize_int";
   "prioritize_real"; "hide_constant"; "unhide_constant"; "new_type_abbrev"; "remove_type_abbrev";
   "the_implicit_types"; "install_user_printer"; "delete_user_printer"; "set_jrh_lexer"; "unset_jrh_lexer"],
  "changes how later quotations parse or print (the goal was parsed before the proof ran); write terms with \
   the constants' own names";
  ["the_specifications"; "the_type_definitions"; "the_inductive_definitions"; "the_inductive_types";
   "the_projections"],
  "changes HOL Light's record of definitions, which a tactic has no need to do";
  ["Printf.fprintf"; "Printf.kfprintf"; "Printf.ifprintf"; "Format.formatter_of_out_channel";
   "Format.set_formatter_out_channel"; "Format.pp_set_formatter_out_channel"; "output"; "output_value";
   "output_string"; "output_bytes"; "output_char"; "output_byte"; "output_binary_int"; "output_substring";
   "seek_out"; "pos_out"; "out_channel_length"; "set_binary_mode_out"; "flush_all"],
  "writes to a channel of the proof's choosing; print progress with print_string, Printf.printf or Format.printf"]

(* Values whose use taints a trusted definition (the seeds of the taint analysis): I/O, the process, the
   loader, the kernel's back doors. They stay tainted whatever (re)defines them. Their class for a
   submission comes from the tables above (each one is listed there); this list only seeds the taint. *)
let pg_root_names =
  ["open_in"; "open_in_bin"; "open_in_gen"; "open_out"; "open_out_bin"; "open_out_gen"; "close_in";
   "close_in_noerr"; "close_out"; "close_out_noerr"; "input"; "input_line"; "input_char"; "input_byte";
   "input_binary_int"; "input_value"; "really_input"; "really_input_string"; "output"; "output_value";
   "output_string"; "output_bytes"; "output_char"; "output_byte"; "output_binary_int"; "output_substring";
   "seek_in"; "seek_out"; "pos_in"; "pos_out"; "in_channel_length"; "out_channel_length"; "set_binary_mode_in";
   "set_binary_mode_out"; "read_line"; "read_int"; "read_int_opt"; "read_float"; "read_float_opt"; "exit";
   "at_exit"; "do_at_exit"; "stdin"; "flush_all"; "CHEAT_TAC"; "file_of_string";
   "string_of_file"; "exec"; "load"; "loads"; "loadt"; "needs"; "use_file"; "load_on_path"; "file_on_path";
   "hol_expand_directory"; "load_path"; "loaded_files"; "hol_dir"; "temp_path"; "use_file_raise_failure";
   "file_loader"; "update_database"; "pg_note_file"; "set_jrh_lexer"; "unset_jrh_lexer"]
  @ pg_extension_names

(* Class 2, Stdlib values a submission may use (the typed tree names them Stdlib.x): arithmetic,
   comparison, strings, exceptions, refs (a memo), and printing to the proof's own output. *)
let pg_stdlib_values =
  ["="; "<>"; "=="; "!="; "<"; ">"; "<="; ">="; "compare"; "min"; "max"; "&&"; "||"; "not"; "+"; "-"; "*";
   "/"; "mod"; "abs"; "~-"; "~+"; "succ"; "pred"; "land"; "lor"; "lxor"; "lsl"; "lsr"; "asr"; "lnot"; "+.";
   "-."; "*."; "/."; "**"; "float_of_int"; "int_of_float"; "float"; "truncate"; "@"; "^"; "fst"; "snd";
   "ignore"; "failwith"; "invalid_arg"; "raise"; "string_of_int"; "int_of_string"; "string_of_bool"; "|>";
   "@@"; "!"; "ref"; "incr"; "decr"; "max_int"; "min_int";
   (* added for issue 26: memo tables and progress output are honest *)
   ":="; "print_string"; "print_endline"; "print_newline"; "print_int"; "print_char"; "print_float";
   "prerr_string"; "prerr_endline"; "prerr_newline"; "prerr_int"; "string_of_float"; "float_of_string";
   "int_of_string_opt"; "float_of_string_opt"; "bool_of_string"; "int_of_char"; "char_of_int"; "sqrt"; "exp";
   "log"; "raise_notrace"; "bool_of_string_opt"; "stdout"; "stderr"; "flush"]

(* Class 2, Stdlib modules a submission may use, except any *unsafe* value (class 1) and the channel writers
   of pg_error_names (class 3). None of them reaches the kernel or a descriptor other than stdout/stderr. *)
let pg_stdlib_modules =
  ["List"; "Array"; "String"; "Char"; "Option"; "Hashtbl"; "Printf"; "Format"; "Buffer"; "Int"; "Bool"; "Lazy";
   "Fun"; "Seq"; "Stack"; "Queue"; "Num"]

(* Class 2, single qualified values of otherwise refused modules. *)
let pg_allowed_qualified = ["Sys.time"; "Printexc.to_string"]

(* The feedback of every class-3 verdict. *)
let pg_allowed_summary =
  "allowed: HOL Light's tactics, rules, conversions and theorems and the context's (unless they reach a \
   refused name); the proof's own let/fun bindings; OCaml's arithmetic, comparison, string and exception \
   values, ref/!/:=, print_string and friends; the modules " ^ String.concat ", " pg_stdlib_modules
  ^ " (print progress with print_string or Printf.printf, format a failure with Printf.sprintf, memoise with \
     Hashtbl or a ref); Sys.time, Printexc.to_string"

(* A module as a submission may write it: Stdlib__Obj and Stdlib__obj are Obj. *)
let pg_module_name m =
  let p = "Stdlib__" in
  let n = String.length p in
  if String.length m > n && String.sub m 0 n = p then String.capitalize_ascii (String.sub m n (String.length m - n))
  else m

(* Some (verdict, reason) for a name a table above classes; None when no table lists it. *)
let pg_name_class n =
  let find tables = List.find_opt (fun (names, _) -> List.mem n names) tables in
  match find pg_error_names with
  | Some (_, why) -> Some ("ERROR", why)
  | None ->
      match find pg_cheat_names with
      | Some (_, why) -> Some ("CHEATING", why)
      | None ->
          if String.length n >= 3 && String.lowercase_ascii (String.sub n 0 3) = "pg_" then Some ("CHEATING", pg_own_reason)
          else None

(* Some (verdict, reason) for a qualified name M.x (parts without a leading Stdlib); None when allowed. *)
let pg_qualified_class parts =
  let parts = List.map pg_module_name parts in
  let parts = match parts with ("Stdlib" | "Pervasives") :: (_ :: _ as rest) -> rest | _ -> parts in
  let dotted = String.concat "." parts in
  let last = List.nth parts (List.length parts - 1) in
  let in_table tables = List.find_opt (fun (names, _) -> List.mem dotted names) tables in
  if List.mem dotted pg_allowed_qualified then None else
  match List.find_opt (fun (ms, _) -> List.exists (fun m -> List.mem m ms) parts) pg_cheat_modules with
  | Some (_, why) -> Some ("CHEATING", why)
  | None when List.exists (fun x -> pg_find_sub (String.lowercase_ascii x) "unsafe" 0 >= 0) parts ->
      Some ("CHEATING", "an unsafe accessor skips its bounds check: reads and writes memory outside the value")
  | None ->
      match in_table pg_cheat_qualified, in_table pg_error_names, pg_name_class last with
      | Some (_, why), _, _ -> Some ("CHEATING", why)
      | None, Some (_, why), _ -> Some ("ERROR", why)
      | None, None, Some ("CHEATING", why) -> Some ("CHEATING", why)
      | None, None, _ ->
          match parts with
          | [v] when List.mem v pg_stdlib_values -> None
          | [m; _] when List.mem m pg_stdlib_modules -> None
          | _ -> Some ("ERROR", "is not on the allow-list")

module SS = Set.Make (String)

(* The taint analysis over trusted sources: a definition is tainted when its body names a bad
   module, a root name or a tainted definition; a toplevel effect that names something tainted
   taints every name it touches (a ref that now holds a tainted function). The whitelist is every
   name a trusted source defines and leaves untainted. *)
let pg_defined = ref SS.empty
let pg_root_set = SS.of_list pg_root_names
let pg_tainted = ref pg_root_set
let pg_modules : (string, SS.t * SS.t) Hashtbl.t = Hashtbl.create 17   (* module -> (defined, tainted) *)
let pg_taint_why : (string, string) Hashtbl.t = Hashtbl.create 997      (* name -> what tainted it *)

let pg_lid_parts lid = Longident.flatten lid
let pg_lid_name lid = String.concat "." (pg_lid_parts lid)

(* What taints a trusted definition: a module that reaches the process, the toplevel or memory,
   or one of the few harmful functions of otherwise harmless modules (Sys.time is fine). *)
let pg_taint_modules =
  ["Obj"; "Marshal"; "Unix"; "UnixLabels"; "Toploop"; "Topdirs"; "Topmain"; "Env"; "Typemod"; "Typecore";
   "Ctype"; "Compmisc"; "Symtable"; "Dynlink"; "Dll"; "Meta"; "Callback"; "Scanf"; "In_channel"; "Out_channel";
   "Pcaml"; "Plexer"; "Quotation"; "Grammar"; "Pgsys"; "CamlinternalOO"; "CamlinternalMod"; "Lexer"; "Parse";
   "Pparse"; "Stdlib__Obj"; "Ephemeron"; "Weak"]

let pg_taint_qualified =
  ["Sys.command"; "Sys.remove"; "Sys.rename"; "Sys.chdir"; "Sys.mkdir"; "Sys.rmdir"; "Sys.readdir";
   "Sys.signal"; "Sys.set_signal"; "Sys.catch_break"; "Filename.temp_file"; "Filename.open_temp_file";
   "Digest.file"; "Digest.channel"; "Gc.set"; "Gc.finalise"; "Gc.finalise_last"; "Gc.create_alarm";
   "Printexc.set_uncaught_exception_handler"; "Format.formatter_of_out_channel"; "Printf.fprintf";
   "Format.set_formatter_out_channel"]

let pg_bad_lid lid =
  let parts = pg_lid_parts lid in
  let parts = match parts with "Stdlib" :: (_ :: _ as rest) -> rest | _ -> parts in
  match parts with
  | [n] -> SS.mem n !pg_tainted
  | m :: _ ->
      List.mem m pg_taint_modules || List.mem (String.concat "." parts) pg_taint_qualified
      || List.exists (fun x -> pg_find_sub x "unsafe" 0 >= 0) parts
      || List.mem (List.nth parts (List.length parts - 1)) pg_root_names
  | [] -> false

let pg_pat_vars p =
  let vars = ref [] in
  let it = { Ast_iterator.default_iterator with
             Ast_iterator.pat = (fun sub p ->
               (match p.Parsetree.ppat_desc with
                | Parsetree.Ppat_var { Location.txt; _ } | Parsetree.Ppat_alias (_, { Location.txt; _ }) ->
                    vars := txt :: !vars
                | _ -> ());
               Ast_iterator.default_iterator.Ast_iterator.pat sub p) } in
  it.Ast_iterator.pat it p; !vars

(* Identifiers an expression names, less those bound by its own patterns (HOL's parsers name
   their argument "input": an approximation of scope, for trusted code), and its assignments
   [r := e] / [r.contents <- e] with the identifiers of [e]. *)
let pg_refs_of_expr (e : Parsetree.expression) =
  let refs = ref [] and assigns = ref [] and bound = ref SS.empty in
  let collect = { Ast_iterator.default_iterator with
                  Ast_iterator.pat = (fun sub p ->
                    List.iter (fun v -> bound := SS.add v !bound) (pg_pat_vars p);
                    Ast_iterator.default_iterator.Ast_iterator.pat sub p) } in
  collect.Ast_iterator.expr collect e;
  let rec walk e =
    let found = ref [] in
    let it = { Ast_iterator.default_iterator with
               Ast_iterator.expr = (fun sub x ->
                 (match x.Parsetree.pexp_desc with
                  | Parsetree.Pexp_ident { Location.txt; _ } -> found := txt :: !found
                  | Parsetree.Pexp_apply ({ Parsetree.pexp_desc = Parsetree.Pexp_ident { Location.txt = Longident.Lident ":="; _ }; _ },
                                          [(_, { Parsetree.pexp_desc = Parsetree.Pexp_ident { Location.txt = Longident.Lident r; _ }; _ }); (_, rhs)])
                  | Parsetree.Pexp_setfield ({ Parsetree.pexp_desc = Parsetree.Pexp_ident { Location.txt = Longident.Lident r; _ }; _ }, _, rhs) ->
                      assigns := (r, walk rhs) :: !assigns
                  | _ -> ());
                 Ast_iterator.default_iterator.Ast_iterator.expr sub x);
               Ast_iterator.module_expr = (fun sub m ->
                 (match m.Parsetree.pmod_desc with
                  | Parsetree.Pmod_ident { Location.txt; _ } -> found := Longident.Ldot (txt, "_") :: !found
                  | _ -> ());
                 Ast_iterator.default_iterator.Ast_iterator.module_expr sub m) } in
    it.Ast_iterator.expr it e;
    List.filter (fun lid -> match lid with
      | Longident.Lident n -> not (SS.mem n !bound)
      | _ -> true) !found in
  let r = walk e in
  (r, !assigns)

(* Plain data cannot run anything when a proof uses it: a value whose type has no arrow, built from
   theorems, terms, types, numbers, strings and booleans with tuples, lists, arrays and options. Such a
   value stays usable however it was computed: the context's earlier lemmas (proved by CHEAT_TAC, as the
   benchmark prescribes) and s2n-bignum's *_EXEC theorems, tuples built from a value that read the
   routine's object file when the context loaded. Everything else is code, or may hide code (a record,
   a variant, a ref, lazy, exn, an object, a type variable): it is judged by its taint. The types are
   matched by path, resolved before any context ran, so a context's own [type thm = ...] is not data. *)
let pg_ref_path : Path.t option ref = ref None
let pg_data_paths : Path.t list ref =
  ref [Predef.path_int; Predef.path_char; Predef.path_string; Predef.path_bool; Predef.path_unit;
       Predef.path_float; Predef.path_list; Predef.path_array; Predef.path_option]

(* HOL Light's thm, term, hol_type and num, resolved as soon as they exist (bindings are recorded while
   the files load: pg_record_names), and no more once the base is loaded: a context's own [type thm] is
   another type. *)
let pg_data_pending = ref ["thm"; "term"; "hol_type"; "num"]
let pg_data_final = ref false

let pg_note_data_types () =
  if not !pg_data_final then begin
    let env = !Toploop.toplevel_env in
    pg_data_pending := List.filter (fun name ->
      match Env.find_type_by_name (Longident.Lident name) env with
      | (p, _) ->
          (* the path a value's type expands to: [include Hol] makes thm an alias of the abstract Hol.thm *)
          let p = match PG_CONFIG_type_desc (Ctype.expand_head env (Ctype.newconstr p [])) with
            | Types.Tconstr (q, _, _) -> q | _ -> p in
          pg_data_paths := p :: !pg_data_paths; false
      | exception Not_found -> true) !pg_data_pending;
    if !pg_ref_path = None then
      match Env.find_type_by_name (Longident.Lident "ref") env with
      | (p, _) -> pg_ref_path := Some p
      | exception Not_found -> ()
  end

let rec pg_data_type ~refs env depth ty =
  depth < 100 &&
  match PG_CONFIG_type_desc (Ctype.expand_head env ty) with
  | Types.Ttuple tys -> List.for_all (pg_data_type ~refs env (depth + 1)) tys
  | Types.Tconstr (p, args, _) ->
      (List.exists (Path.same p) !pg_data_paths || (refs && Option.fold ~none:false ~some:(Path.same p) !pg_ref_path))
      && List.for_all (pg_data_type ~refs env (depth + 1)) args
  | _ -> false

(* [refs]: a ref of data counts as data too. Not for the whitelist (a submission gets no refs), but for
   the taint analysis: trusted code that keeps theorems in a ref (inductive_type_store) passes no code on. *)
let pg_is_data ?(refs = false) n =
  let env = !Toploop.toplevel_env in
  match Env.find_value_by_name (Longident.Lident n) env with
  | (_, vd) -> (try pg_data_type ~refs env 0 vd.Types.val_type with _ -> false)
  | exception _ -> false

(* Whether every binding of a name so far was plain data, recorded as each binding ran (the type of a
   binding that a later one shadows is gone by the time the analysis runs). A tainted name passes no taint
   on where all its bindings were data: a definition that reads a theorem runs nothing of what computed
   it. Names never recorded (module members, anything not a toplevel let) pass their taint on. *)
let pg_def_data : (string, bool) Hashtbl.t = Hashtbl.create 8192

let pg_record_names names =
  List.iter (fun n ->
    let data = pg_is_data ~refs:true n in
    Hashtbl.replace pg_def_data n (data && Option.value ~default:true (Hashtbl.find_opt pg_def_data n))) names

let pg_phrase_names = function
  | Parsetree.Ptop_def items ->
      List.concat_map (fun (it : Parsetree.structure_item) -> match it.Parsetree.pstr_desc with
        | Parsetree.Pstr_value (_, vbs) -> List.concat_map (fun vb -> pg_pat_vars vb.Parsetree.pvb_pat) vbs
        | _ -> []) items
  | Parsetree.Ptop_dir _ -> []

(* Files are parsed whole before they run (Toploop.use_file), so the parser HOL Light installs (camlp5)
   is wrapped: after each phrase that binds names comes [let () = pg_record_phrase K], which records
   their types as they are right then. Reinstalled before every file, in case a file replaced the parser. *)
let pg_pending_names : (int, string list) Hashtbl.t = Hashtbl.create 64
let pg_pending_next = ref 0

let pg_record_phrase k =
  (match Hashtbl.find_opt pg_pending_names k with Some names -> pg_record_names names | None -> ());
  Hashtbl.remove pg_pending_names k

let pg_unwrapped_parser = ref !Toploop.parse_use_file

let pg_recording_parser lb =
  List.concat_map (fun ph ->
    match pg_phrase_names ph with
    | [] -> [ph]
    | names ->
        incr pg_pending_next;
        Hashtbl.replace pg_pending_names !pg_pending_next names;
        let call = Ast_helper.Exp.apply (Ast_helper.Exp.ident (Location.mknoloc (Longident.Lident "pg_record_phrase")))
            [Asttypes.Nolabel, Ast_helper.Exp.constant (Ast_helper.Const.int !pg_pending_next)] in
        let unit = Ast_helper.Pat.construct (Location.mknoloc (Longident.Lident "()")) None in
        [ph; Parsetree.Ptop_def [Ast_helper.Str.value Asttypes.Nonrecursive [Ast_helper.Vb.mk unit call]]])
    (!pg_unwrapped_parser lb)

let () = pg_before_file := (fun () ->
  pg_note_data_types ();
  if !Toploop.parse_use_file != pg_recording_parser then begin
    pg_unwrapped_parser := !Toploop.parse_use_file;
    Toploop.parse_use_file := pg_recording_parser
  end)

let pg_passes_taint n =
  SS.mem n pg_root_set || Hashtbl.find_opt pg_def_data n <> Some true || not (pg_is_data ~refs:true n)

(* refs that some trusted code assigns a tainted value: never clean again *)
let pg_tainted_refs = ref SS.empty
let pg_current_file = ref ""

let rec pg_analyse_items (items : Parsetree.structure) (defined : SS.t ref) (tainted : SS.t ref) =
  let bad lid = match pg_lid_parts lid with
    | [n] -> (SS.mem n !pg_tainted || SS.mem n !tainted || SS.mem n !pg_tainted_refs) && pg_passes_taint n
    | _ -> pg_bad_lid lid in
  let note_assigns assigns =
    List.iter (fun (r, rhs) -> match List.find_opt bad rhs with
      | Some culprit when not (SS.mem r !pg_tainted_refs) ->
          pg_tainted_refs := SS.add r !pg_tainted_refs;
          Hashtbl.replace pg_taint_why r ("an assignment of " ^ pg_lid_name culprit)
      | _ -> ()) assigns in
  List.iter (fun (item : Parsetree.structure_item) ->
    match item.Parsetree.pstr_desc with
    | Parsetree.Pstr_value (_, vbs) ->
        let names = List.concat_map (fun vb -> pg_pat_vars vb.Parsetree.pvb_pat) vbs in
        let analysed = List.map (fun vb -> pg_refs_of_expr vb.Parsetree.pvb_expr) vbs in
        let refs = List.concat_map fst analysed in
        note_assigns (List.concat_map snd analysed);
        (* the reason kept is the worst culprit: a class-1 name before an unknown one before a class-3 one *)
        let rank lid = match pg_lid_parts lid with
          | [n] -> (match pg_name_class n with Some ("CHEATING", _) -> 0 | Some _ -> 2 | None -> 1)
          | parts -> (match pg_qualified_class (match parts with "Stdlib" :: (_ :: _ as r) -> r | p -> p) with
              | Some ("CHEATING", _) -> 0 | _ -> 2) in
        let culprit = List.fold_left (fun best lid ->
            if not (bad lid) then best
            else match best with Some b when rank b <= rank lid -> best | _ -> Some lid) None refs in
        List.iter (fun n ->
          defined := SS.add n !defined;
          match culprit with
          | Some lid ->
              if not (SS.mem n !tainted) then
                Hashtbl.replace pg_taint_why n (pg_lid_name lid ^ " in " ^ !pg_current_file);
              tainted := SS.add n !tainted
          | None -> if not (SS.mem n pg_root_set) then tainted := SS.remove n !tainted) names
    | Parsetree.Pstr_eval (e, _) -> note_assigns (snd (pg_refs_of_expr e))
    | Parsetree.Pstr_primitive vd ->
        defined := SS.add vd.Parsetree.pval_name.Location.txt !defined;
        tainted := SS.add vd.Parsetree.pval_name.Location.txt !tainted;
        Hashtbl.replace pg_taint_why vd.Parsetree.pval_name.Location.txt "external"
    | Parsetree.Pstr_module { Parsetree.pmb_name = { Location.txt = Some name; _ }; pmb_expr; _ } ->
        let rec body (m : Parsetree.module_expr) = match m.Parsetree.pmod_desc with
          | Parsetree.Pmod_structure s -> Some s
          | Parsetree.Pmod_constraint (m, _) -> body m
          | _ -> None in
        (match body pmb_expr with
         | Some s ->
             let d = ref SS.empty and t = ref !tainted in
             pg_analyse_items s d t;
             Hashtbl.replace pg_modules name (!d, SS.inter !d !t)
         | None -> ())
    | Parsetree.Pstr_include { Parsetree.pincl_mod = { Parsetree.pmod_desc = Parsetree.Pmod_ident { Location.txt = Longident.Lident m; _ }; _ }; _ } ->
        (match Hashtbl.find_opt pg_modules m with
         | Some (d, t) ->
             defined := SS.union d !defined;
             tainted := SS.union t (SS.diff !tainted (SS.diff d t))
         | None -> ())
    | _ -> ()) items

let pg_analyse_phrases phrases =
  List.iter (function
    | Parsetree.Ptop_def items -> pg_analyse_items items pg_defined pg_tainted
    | Parsetree.Ptop_dir _ -> ()) phrases

let pg_parse_text name text =
  let lb = Lexing.from_string text in
  Lexing.set_filename lb name;
  (if !Toploop.parse_use_file == pg_recording_parser then !pg_unwrapped_parser else !Toploop.parse_use_file) lb

let pg_parse_file path =
  try pg_parse_text path (pg_read_file path)
  with e -> pg_log "whitelist: cannot re-read %s (%s); its names stay off the whitelist" path (Printexc.to_string e); []

(* Two passes: the second sees every ref the first found assigned a tainted value. *)
let pg_analyse_files paths =
  let parsed = List.map (fun p -> (p, pg_parse_file p)) paths in
  let pass () = List.iter (fun (p, phrases) -> pg_current_file := p; pg_analyse_phrases phrases) parsed in
  pass ();
  pg_defined := SS.empty; pg_tainted := pg_root_set; Hashtbl.reset pg_modules; Hashtbl.reset pg_taint_why;
  pass ()

(* A name a table classes is never on the whitelist, whatever binds it. *)
let pg_denied_name n = pg_name_class n <> None

let pg_allowed n =
  SS.mem n !pg_defined && not (pg_denied_name n) && (not (SS.mem n !pg_tainted) || pg_is_data n)

(* The seed a tainted name reaches: pg_taint_why, followed from name to name ("x in file", "an assignment
   of x") to a root name, a qualified value or an external. *)
let pg_taint_seed n =
  let culprit why =
    let p = "an assignment of " in
    let lp = String.length p in
    if String.length why > lp && String.sub why 0 lp = p then String.sub why lp (String.length why - lp)
    else match String.index_opt why ' ' with Some i -> String.sub why 0 i | None -> why in
  let rec go n depth =
    if depth > 100 || pg_name_class n <> None || List.mem n pg_root_names || String.contains n '.' then n
    else match Hashtbl.find_opt pg_taint_why n with
      | None -> n
      | Some "external" -> "external"
      | Some why -> let c = culprit why in if c = n then n else go c (depth + 1) in
  go n 0

(* Some (verdict, reason) for a trusted name the taint analysis refused: the class of what it reaches. *)
let pg_tainted_class n =
  let seed = pg_taint_seed n in
  let via = if seed = n then "" else " (through " ^ seed ^ ")" in
  let cls = if seed = "external" then Some ("CHEATING", "an external primitive: C code below the type system")
    else if String.contains seed '.' then pg_qualified_class (String.split_on_char '.' seed)
    else pg_name_class seed in
  match cls with
  | Some (v, why) -> Some (v, "reaches what a proof may not use" ^ via ^ ": " ^ why)
  | None -> Some ("ERROR", "reaches what a proof may not use" ^ via)

(* The class of a global name a submission uses: None (class 2) or Some (verdict, reason). *)
let pg_global_class n =
  match pg_name_class n with
  | Some c -> Some c
  | None when pg_allowed n -> None
  | None when SS.mem n !pg_defined -> pg_tainted_class n   (* a trusted source's own binding: its taint decides *)
  | None when List.mem n pg_stdlib_values -> None          (* the typed tree checks it is the Stdlib's *)
  | None -> Some ("ERROR", "is not on the allow-list")

(* ------------------------------------------------------------------------------------------ *)
(* checking a submission                                                                       *)

type pg_outcome = { verdict : string; category : string; reasons : string list; detail : string; goals : string }

exception Pg_reject of pg_outcome

let pg_outcome ?(detail = "") ?(goals = "") verdict category reasons = { verdict; category; reasons; detail; goals }
let pg_cheat reasons = raise (Pg_reject (pg_outcome "CHEATING" "cheating" reasons))

(* A finding about a submission: its class ("CHEATING" or "ERROR") and the reason. *)
type pg_finding = string * string

(* The verdict of a list of findings: CHEATING if any is class 1 (only those reasons), else ERROR with the
   reasons and what is allowed. *)
let pg_judge ?(category = "undefined") (findings : pg_finding list) =
  let uniq l = List.rev (List.fold_left (fun acc r -> if List.mem r acc then acc else r :: acc) [] l) in
  match List.filter (fun (v, _) -> v = "CHEATING") findings with
  | _ :: _ as cheats -> pg_cheat (uniq (List.map snd cheats))
  | [] when findings <> [] ->
      raise (Pg_reject (pg_outcome "ERROR" category (uniq (List.map snd findings) @ [pg_allowed_summary])))
  | [] -> ()

let pg_external_reason =
  "an external declaration: a C primitive of the proof's choosing (\"%identity\" is Obj.magic)"

(* The parse tree: identifiers, constructors and syntax. Names bound inside the submission are its own
   values (the typed tree knows their scope exactly); unbound names are left to the type checker. *)
let pg_check_parsetree (e : Parsetree.expression) : pg_finding list =
  let found = ref [] in
  let add (v, r) = found := (v, r) :: !found in
  let locals = ref SS.empty in
  let collect = { Ast_iterator.default_iterator with
                  Ast_iterator.pat = (fun sub p ->
                    List.iter (fun v -> locals := SS.add v !locals) (pg_pat_vars p);
                    Ast_iterator.default_iterator.Ast_iterator.pat sub p) } in
  collect.Ast_iterator.expr collect e;
  let check_lid what lid =
    match pg_lid_parts lid with
    | [n] when what = "constructor" ->
        if String.length n >= 3 && String.sub n 0 3 = "Pg_" then add ("CHEATING", "uses " ^ n ^ ": " ^ pg_own_reason)
    | [n] ->
        if not (SS.mem n !locals) then begin
          match Env.find_value_by_name (Longident.Lident n) !Toploop.toplevel_env with
          | exception Not_found ->
              (* unbound: the type checker says ERROR; a class-1 name is refused by name all the same *)
              (match pg_name_class n with Some ("CHEATING", why) -> add ("CHEATING", "uses " ^ n ^ ": " ^ why) | _ -> ())
          | _ when SS.mem n !pg_defined || pg_name_class n <> None ->
              (match pg_global_class n with Some (v, why) -> add (v, "uses " ^ n ^ ": " ^ why) | None -> ())
          | _ -> ()   (* bound by an open (Format, Num ...): the typed tree judges its real path *)
        end
    | parts ->
        let parts = match parts with "Stdlib" :: (_ :: _ as rest) -> rest | _ -> parts in
        (match pg_qualified_class parts with
         | Some (v, why) -> add (v, "uses " ^ pg_lid_name lid ^ ": " ^ why)
         | None -> ())
  in
  let refuse v what = add (v, what) in
  let error what = refuse "ERROR" (what ^ " is not allowed in a tactic") in
  let module_ident lid =
    match pg_qualified_class (pg_lid_parts lid @ ["_"]) with
    | Some ("CHEATING", why) -> add ("CHEATING", "names the module " ^ pg_lid_name lid ^ ": " ^ why)
    | _ -> () in
  let it = { Ast_iterator.default_iterator with
    Ast_iterator.expr = (fun sub x ->
      (match x.Parsetree.pexp_desc with
       | Parsetree.Pexp_ident { Location.txt; _ } -> check_lid "value" txt
       | Parsetree.Pexp_construct ({ Location.txt; _ }, _) -> check_lid "constructor" txt
       | Parsetree.Pexp_letmodule _ -> error "a local module (let module)"
       | Parsetree.Pexp_open _ -> error "open (write M.x)"
       | Parsetree.Pexp_object _ | Parsetree.Pexp_new _ | Parsetree.Pexp_send _ | Parsetree.Pexp_setinstvar _
       | Parsetree.Pexp_override _ | Parsetree.Pexp_poly _ -> error "an object"
       | Parsetree.Pexp_extension _ -> error "an extension node"
       | Parsetree.Pexp_pack _ -> error "a first-class module"
       | Parsetree.Pexp_letexception _ -> error "a local exception"
       | Parsetree.Pexp_newtype _ -> error "a local type"
       | Parsetree.Pexp_letop _ -> error "a binding operator"
       | Parsetree.Pexp_setfield _ -> error "a mutable field update (use :=)"
       | Parsetree.Pexp_unreachable -> error "an unreachable clause"
       | _ -> ());
      Ast_iterator.default_iterator.Ast_iterator.expr sub x);
    Ast_iterator.pat = (fun sub p ->
      (match p.Parsetree.ppat_desc with
       | Parsetree.Ppat_unpack _ -> error "a first-class module pattern"
       | Parsetree.Ppat_extension _ -> error "an extension node"
       | Parsetree.Ppat_open _ -> error "open (write M.x)"
       | Parsetree.Ppat_construct ({ Location.txt; _ }, _) -> check_lid "constructor" txt
       | _ -> ());
      Ast_iterator.default_iterator.Ast_iterator.pat sub p);
    Ast_iterator.typ = (fun sub t ->
      (match t.Parsetree.ptyp_desc with
       | Parsetree.Ptyp_package _ -> error "a module type"
       | Parsetree.Ptyp_extension _ -> error "an extension node"
       | Parsetree.Ptyp_class _ | Parsetree.Ptyp_object _ -> error "an object type"
       | _ -> ());
      Ast_iterator.default_iterator.Ast_iterator.typ sub t);
    Ast_iterator.attribute = (fun _ a ->
      refuse "ERROR" (Printf.sprintf "attribute [@%s] is not allowed in a tactic (remove it)" a.Parsetree.attr_name.Location.txt));
    Ast_iterator.module_expr = (fun sub m ->
      (match m.Parsetree.pmod_desc with
       | Parsetree.Pmod_ident { Location.txt; _ } -> module_ident txt
       | _ -> ());
      error "a module expression";
      Ast_iterator.default_iterator.Ast_iterator.module_expr sub m);
    (* the one thing a local module can do that nothing else can: declare a primitive *)
    Ast_iterator.structure_item = (fun sub si ->
      (match si.Parsetree.pstr_desc with
       | Parsetree.Pstr_primitive _ -> refuse "CHEATING" pg_external_reason
       | _ -> ());
      Ast_iterator.default_iterator.Ast_iterator.structure_item sub si);
    Ast_iterator.signature_item = (fun sub si ->
      (match si.Parsetree.psig_desc with
       | Parsetree.Psig_value { Parsetree.pval_prim = _ :: _; _ } -> refuse "CHEATING" pg_external_reason
       | _ -> ());
      Ast_iterator.default_iterator.Ast_iterator.signature_item sub si);
    Ast_iterator.class_expr = (fun _ _ -> error "a class");
    Ast_iterator.extension = (fun _ _ -> error "an extension node") } in
  it.Ast_iterator.expr it e;
  List.rev !found

(* The typed tree: every identifier is bound inside the submission, or is the current global binding of a
   whitelisted name, or an allowed Stdlib value; anything else is classed as on the parse tree. *)
let pg_check_typedtree env (te : Typedtree.expression) : pg_finding list =
  let found = ref [] in
  let add f = found := f :: !found in
  let locals = ref [] in
  let collect_pat : type k. Tast_iterator.iterator -> k Typedtree.general_pattern -> unit = fun sub p ->
    (match p.Typedtree.pat_desc with
     | Typedtree.Tpat_var (id, _) -> locals := id :: !locals
     | Typedtree.Tpat_alias (_, id, _) -> locals := id :: !locals
     | _ -> ());
    Tast_iterator.default_iterator.Tast_iterator.pat sub p in
  let collect = { Tast_iterator.default_iterator with Tast_iterator.pat = collect_pat } in
  collect.Tast_iterator.expr collect te;
  let is_local id = List.exists (Ident.same id) !locals in
  let rec parts p = match p with
    | Path.Pident id -> [Ident.name id]
    | Path.Pdot (q, v) -> parts q @ [v]
    | Path.Papply (q, _) -> parts q in
  let check_path p =
    match p with
    | Path.Pident id when is_local id -> ()
    | Path.Pident id ->
        let n = Ident.name id in
        let found = try Some (Env.find_value_by_name (Longident.Lident n) env) with Not_found -> None in
        let same = match found with Some (p', _) -> Path.same p p' | None -> false in
        (* HOL Light includes Format at the toplevel (printer.ml): print_string and printf are Format's there,
           globals of their own. A global no trusted source defines is judged as the library value it was
           declared as (format.mli: Format.x, stdlib.mli: Stdlib.x); one declared anywhere else is ERROR. *)
        let declared_in = match found with
          | Some (_, d) ->
              let f = Filename.basename d.Types.val_loc.Location.loc_start.Lexing.pos_fname in
              if f = "stdlib.mli" then Some []
              else if Filename.check_suffix f ".mli" then Some [String.capitalize_ascii (Filename.chop_suffix f ".mli")]
              else None
          | None -> None in
        if same && pg_allowed n then ()
        else if same && not (SS.mem n !pg_defined) && pg_name_class n = None && declared_in <> None then
          (match pg_qualified_class (Option.get declared_in @ [n]) with
           | Some (v, why) -> add (v, "typed tree: uses " ^ n ^ " (" ^ String.concat "." (Option.get declared_in @ [n])
                                      ^ "): " ^ why)
           | None -> ())
        else
          (match pg_global_class n with
           | Some (v, why) -> add (v, "typed tree: uses " ^ n ^ ": " ^ why)
           | None ->
               let where = match found with
                 | Some (_, d) -> Filename.basename d.Types.val_loc.Location.loc_start.Lexing.pos_fname | None -> "?" in
               add ("ERROR", "typed tree: " ^ n ^ " is not the Stdlib's or the whitelisted global binding of that \
                             name (declared in " ^ where ^ ")"))
    | _ ->
        let ps = match parts p with "Stdlib" :: (_ :: _ as rest) -> rest | ps -> ps in
        (match pg_qualified_class ps with
         | Some (v, why) -> add (v, "typed tree: uses " ^ Path.name p ^ ": " ^ why)
         | None -> ()) in
  let expr sub (x : Typedtree.expression) =
    (match x.Typedtree.exp_desc with
     | Typedtree.Texp_ident (p, _, _) -> check_path p
     | Typedtree.Texp_letmodule _ | Typedtree.Texp_letexception _ | Typedtree.Texp_object _
     | Typedtree.Texp_pack _ | Typedtree.Texp_open _ | Typedtree.Texp_send _ | Typedtree.Texp_new _
     | Typedtree.Texp_instvar _ | Typedtree.Texp_setinstvar _ | Typedtree.Texp_override _
     | Typedtree.Texp_letop _ | Typedtree.Texp_extension_constructor _ | Typedtree.Texp_setfield _ ->
         add ("ERROR", "typed tree: a construct a tactic may not use (module, object, open, local exception)")
     | _ -> ());
    Tast_iterator.default_iterator.Tast_iterator.expr sub x in
  let it = { Tast_iterator.default_iterator with Tast_iterator.expr = expr } in
  it.Tast_iterator.expr it te;
  List.rev !found

let pg_error_text e =
  try Location.report_exception Format.str_formatter e; Format.flush_str_formatter ()
  with _ -> Printexc.to_string e

let pg_submission_name = "submission"

let pg_one_expression =
  "the submission must be exactly one tactic expression (`;;` separates phrases): send the tactic alone; \
   a helper goes inside it with let ... in"

(* The names a checker of HOL Light proofs uses to state and check a theorem: a phrase that rebinds one is a
   shadowed checker (server.ml binds its own before any submission, but a grader that runs the text would not). *)
let pg_checker_names =
  ["prove"; "TAC_PROOF"; "axioms"; "constants"; "types"; "concl"; "hyp"; "aconv"; "parse_term"; "type_of";
   "null_inst"; "string_of_term"; "g"; "e"; "set_goal"; "by"; "rotate"; "top_thm"; "mk_goalstate"; "p"; "b"; "r"]

(* A submission of several phrases, a definition or a directive is never run. It is CHEATING where its
   content is (a class-1 name anywhere, a directive, an external, a toplevel definition that rebinds a name
   the checks use or a class-1 name); otherwise ERROR (a helper lemma before the tactic, two tactics). *)
let pg_judge_phrases phrases =
  let found = ref [] in
  let add f = found := f :: !found in
  let bound n = match Env.find_value_by_name (Longident.Lident n) !Toploop.toplevel_env with
    | _ -> true | exception Not_found -> false in
  List.iter (function
    | Parsetree.Ptop_dir { Parsetree.pdir_name = { Location.txt; _ }; _ } ->
        add ("CHEATING", "#" ^ txt ^ ": a toplevel directive (#use, #load, #directory ...) loads or runs code \
                          outside the checked expression")
    | Parsetree.Ptop_def items ->
        List.iter (fun (si : Parsetree.structure_item) ->
          match si.Parsetree.pstr_desc with
          | Parsetree.Pstr_eval (e, _) -> List.iter add (pg_check_parsetree e)
          | Parsetree.Pstr_value (_, vbs) ->
              List.iter (fun vb ->
                List.iter add (pg_check_parsetree vb.Parsetree.pvb_expr);
                List.iter (fun n ->
                  if List.mem n pg_checker_names || (bound n && pg_name_class n <> None) then
                    add ("CHEATING", "redefines " ^ n ^ ", which a checker uses to state or check the theorem"))
                  (pg_pat_vars vb.Parsetree.pvb_pat)) vbs
          | Parsetree.Pstr_primitive _ -> add ("CHEATING", pg_external_reason)
          | Parsetree.Pstr_module _ | Parsetree.Pstr_recmodule _ | Parsetree.Pstr_include _
          | Parsetree.Pstr_open _ ->
              (* walked like a local module: externals and class-1 names inside are found *)
              let e = Ast_helper.Exp.letmodule (Location.mknoloc (Some "M"))
                  (Ast_helper.Mod.structure [si]) (Ast_helper.Exp.construct (Location.mknoloc (Longident.Lident "()")) None) in
              List.iter add (pg_check_parsetree e)
          | _ -> ()) items) phrases;
  add ("ERROR", pg_one_expression);
  pg_judge ~category:"syntax" (List.rev !found)

(* Parse [text] as exactly one OCaml (HOL Light syntax) expression. *)
let pg_parse_submission text =
  let trimmed = String.trim text in
  let body =
    let n = String.length trimmed in
    if n >= 2 && String.sub trimmed (n - 2) 2 = ";;" then String.sub trimmed 0 (n - 2) else trimmed in
  let phrases =
    try pg_parse_text pg_submission_name (body ^ "\n;;\n")
    with
    | Exit -> raise (Pg_reject (pg_outcome "ERROR" "syntax" ["the tactic does not parse"]))  (* camlp5 printed why *)
    | e -> raise (Pg_reject (pg_outcome "ERROR" "syntax" ["the tactic does not parse"] ~detail:(pg_error_text e))) in
  match phrases with
  | [Parsetree.Ptop_def [{ Parsetree.pstr_desc = Parsetree.Pstr_eval (e, []); _ }]] -> e
  | [] -> raise (Pg_reject (pg_outcome "ERROR" "syntax" ["the submission is empty"]))
  | _ -> pg_judge_phrases phrases; raise (Pg_reject (pg_outcome "ERROR" "syntax" [pg_one_expression]))

let pg_tactic_type = Ast_helper.Typ.constr (Location.mknoloc (Longident.Lident "tactic")) []

(* Parse tree + typed tree checks (pg_judge: class 1 is CHEATING, class 3 ERROR). Returns the expression,
   known to have type tactic and to use only class-2 names. A class-3 finding on the parse tree does not
   stop the typed tree: a class-1 value reached through it (let open Obj in magic) is still CHEATING. *)
let pg_vet_submission text =
  let e = pg_parse_submission text in
  let parsed = pg_check_parsetree e in
  pg_judge (List.filter (fun (v, _) -> v = "CHEATING") parsed);
  let env = !Toploop.toplevel_env in
  let constrained = Ast_helper.Exp.constraint_ e pg_tactic_type in
  let te =
    try Typecore.type_expression env constrained
    with exn ->
      pg_judge parsed;
      let msg = pg_error_text exn in
      let category = if pg_find_sub msg "Unbound" 0 >= 0 then "undefined" else "type" in
      raise (Pg_reject (pg_outcome "ERROR" category ["the tactic does not type-check as a tactic"] ~detail:msg)) in
  pg_judge (parsed @ pg_check_typedtree env te);
  e

(* ------------------------------------------------------------------------------------------ *)
(* what a verdict may carry                                                                    *)

(* A verdict frame stays well under the zygote's limit (pg_max_verdict) whatever the proof left: each
   text is capped, and goals past the budget are counted but not shown. A FAIL stays a FAIL. *)
let pg_text_cap = 65536
let pg_goals_budget = 262144
let pg_max_verdict = 1048576

let pg_cap n s =
  if String.length s <= n then s
  else String.sub s 0 n ^ Printf.sprintf " ... [%d more bytes not shown]" (String.length s - n)

(* Goals as "COUNT SHOWN\n", then for each shown goal "NHYPS\n" and its hypotheses and conclusion, each
   as "LEN\nBYTES". Lengths, not separators: a term prints as whatever its names are (mk_var takes any
   string), so no separator byte can be trusted not to occur in one. [goals] render lazily: a proof may
   leave a million, and only those that fit the budget are printed. *)
let pg_encode_goals (goals : (unit -> string list * string) list) =
  let b = Buffer.create 4096 in
  let budget = ref pg_goals_budget and shown = ref 0 in
  let text s =
    let s = pg_cap (min pg_text_cap !budget) s in
    budget := !budget - String.length s;
    Buffer.add_string b (string_of_int (String.length s)); Buffer.add_char b '\n'; Buffer.add_string b s in
  List.iter (fun g ->
    if !budget > 0 then begin
      let hyps, concl = g () in
      incr shown;
      Buffer.add_string b (string_of_int (List.length hyps)); Buffer.add_char b '\n';
      List.iter text hyps; text concl
    end) goals;
  Printf.sprintf "%d %d\n" (List.length goals) !shown ^ Buffer.contents b

(* ------------------------------------------------------------------------------------------ *)
(* HOL-side hooks, filled in by server.ml (HOL syntax) once HOL Light is loaded                *)

(* [pg_prepare goal_text] parses the goal (trusted text) and returns the function that runs a
   tactic thunk on it and checks the theorem; both are closures made before any submission runs. *)
let pg_prepare : (string -> ((unit -> Obj.t) -> pg_outcome)) ref = ref (fun _ -> failwith "server.ml not loaded")
let pg_received : Obj.t option ref = ref None
let pg_hol_version = ref "unknown"

(* ------------------------------------------------------------------------------------------ *)
(* isolation                                                                                   *)

let pg_int_of_fd (fd : Unix.file_descr) : int = Obj.magic fd

(* OCaml numbers signals its own way (Sys.sigalrm is -2): name them, the way a user reads them *)
let pg_signal_name s =
  let names = [Sys.sigabrt, "SIGABRT"; Sys.sigalrm, "SIGALRM"; Sys.sigbus, "SIGBUS"; Sys.sigfpe, "SIGFPE";
               Sys.sighup, "SIGHUP"; Sys.sigill, "SIGILL"; Sys.sigint, "SIGINT"; Sys.sigkill, "SIGKILL";
               Sys.sigpipe, "SIGPIPE"; Sys.sigquit, "SIGQUIT"; Sys.sigsegv, "SIGSEGV"; Sys.sigterm, "SIGTERM";
               Sys.sigusr1, "SIGUSR1"; Sys.sigusr2, "SIGUSR2"; Sys.sigxcpu, "SIGXCPU"; Sys.sigxfsz, "SIGXFSZ"] in
  match List.assoc_opt s names with Some n -> n | None -> Printf.sprintf "signal %d" s
let pg_uid_separation = ref false

(* One small buffer for the /proc files the root and the zygotes read while serving (a zygote polls each
   worker's VmRSS every 50 ms): pg_read_file's fresh 64 KiB buffers go straight to the major heap, which
   pg_quiet_gc all but never collects (measured: the zygote's RSS grew ~2 KiB per check; now flat). *)
let pg_stat_buf = Bytes.create 8192

let pg_read_proc path =
  match Unix.openfile path [Unix.O_RDONLY; Unix.O_CLOEXEC] 0 with
  | exception Unix.Unix_error _ -> ""
  | fd ->
      let rec go n =
        let k = try Unix.read fd pg_stat_buf n (Bytes.length pg_stat_buf - n) with Unix.Unix_error _ -> 0 in
        if k > 0 && n + k < Bytes.length pg_stat_buf then go (n + k) else n + k in
      let n = go 0 in
      Unix.close fd;
      Bytes.sub_string pg_stat_buf 0 n

(* The "Field:   123 kB" value of a /proc text, or None where the field is not there. *)
let pg_field_kb text field =
  try
    let i = pg_find_sub text ("\n" ^ field ^ ":") 0 in
    let i = if i >= 0 then i + 1 else if pg_find_sub text (field ^ ":") 0 = 0 then 0 else -1 in
    if i < 0 then None else
      let j = String.index_from text i '\n' in
      let v = String.trim (String.sub text (i + String.length field + 1) (j - i - String.length field - 1)) in
      Some (int_of_string (List.hd (String.split_on_char ' ' v)))
  with _ -> None

let pg_mem_kb pid field =
  match pg_field_kb (pg_read_proc (Printf.sprintf "/proc/%s/status" pid)) field with Some k -> k | None -> 0

(* CPU milliseconds (user + system) a process has used, from /proc/<pid>/stat (fields 14 and 15, in ticks of
   USER_HZ, which Linux fixes at 100 for /proc); 0 where it cannot be read. The zygote reads its workers'
   every pass of its loop (at least every 50 ms while one runs) for the CPU-time budget. *)
let pg_cpu_ms pid =
  let text = pg_read_proc (Printf.sprintf "/proc/%d/stat" pid) in
  match String.rindex_opt text ')' with
  | Some i when i + 2 < String.length text ->
      (match String.split_on_char ' ' (String.sub text (i + 2) (String.length text - i - 2)) with
       | _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: utime :: stime :: _ ->
           (try 10 * (int_of_string utime + int_of_string stime) with Failure _ -> 0)
       | _ -> 0)
  | _ -> 0

(* What a forked process holds of its own (USS: Private_Clean + Private_Dirty of smaps_rollup); the rest
   of its RSS is the root's pages, shared copy-on-write. The zygote budget counts this. Where
   smaps_rollup cannot be read (a kernel before 4.14, a /proc that hides it) it is the full VmRSS: a
   budget may overcount a zygote, never count it as free. *)
let pg_private_kb pid =
  let text = pg_read_proc (Printf.sprintf "/proc/%s/smaps_rollup" pid) in
  match pg_field_kb text "Private_Clean", pg_field_kb text "Private_Dirty" with
  | Some c, Some d -> c + d
  | _ -> pg_mem_kb pid "VmRSS"

(* Inside bubblewrap the server has its own pid namespace: bwrap's init is pid 1 and the root is its
   child. Only then may the sweeps below kill what /proc lists (outside it, /proc is the host's). *)
let pg_own_pid_ns = Sys.getenv_opt "PROOFGYM_OWN_PID_NS" = Some "1" && Unix.getppid () = 1

(* (pid, parent, state) of every process in this pid namespace *)
let pg_processes () =
  let stat pid =
    let text = pg_read_proc (Printf.sprintf "/proc/%d/stat" pid) in
    match String.rindex_opt text ')' with
    | Some i when i + 2 < String.length text ->
        (match String.split_on_char ' ' (String.sub text (i + 2) (String.length text - i - 2)) with
         | state :: ppid :: _ -> (try Some (pid, int_of_string ppid, state) with Failure _ -> None)
         | _ -> None)
    | _ -> None in
  Array.fold_left (fun acc name ->
      match int_of_string_opt name with
      | Some pid -> (match stat pid with Some p -> p :: acc | None -> acc)
      | None -> acc) [] (try Sys.readdir "/proc" with Sys_error _ -> [||])

(* The root's sweep: kill every process that [doomed pid ppid] picks and wait until it is gone, zombies
   included (a zombie still holds its slot in the server's pids cgroup). A fork bomb refills whatever a
   plain SIGKILL frees, and a few hundred spinning processes starve whoever scans /proc for them. So the
   first thing is kill(-1, SIGSTOP): one system call that stops every process of this pid namespace but
   bwrap's init and the root, atomically with respect to fork (a process with a signal pending cannot
   fork). Nothing moves while the victims are listed and SIGKILLed; then SIGCONT wakes whoever is left
   (zygotes, workers) and the sweep waits for the victims to be reaped (by bwrap's init, or by the zygote
   that forked them). No timing: a loaded machine makes it slower, not wrong. The cap only bounds a
   process that never dies (uninterruptible sleep); it is logged. Only inside bwrap's own pid namespace:
   outside it, -1 would be every process of the user. *)
let pg_kill_until_gone ?(progress = fun () -> ()) doomed =
  if pg_own_pid_ns then begin
    let give_up = Unix.gettimeofday () +. 120.0 in
    let next_progress = ref (Unix.gettimeofday () +. 2.0) in
    let signal s l = List.iter (fun (pid, _, _) -> try Unix.kill pid s with Unix.Unix_error _ -> ()) l in
    let killed = Hashtbl.create 64 in
    let rec pass () =
      (* a long sweep (a machine thrashing under a bomb) tells the client it is working, not wedged *)
      if Unix.gettimeofday () > !next_progress then (progress (); next_progress := Unix.gettimeofday () +. 2.0);
      let victims = List.filter (fun (pid, ppid, _) -> doomed pid ppid) (pg_processes ()) in
      let unkilled = List.filter (fun (pid, _, st) -> st <> "Z" && st <> "X" && not (Hashtbl.mem killed pid)) victims in
      if victims = [] then begin
        if Hashtbl.length killed > 0 then
          pg_log "sweep: %d process(es) killed in %.1f s" (Hashtbl.length killed) (Unix.gettimeofday () -. give_up +. 120.0)
      end else if Unix.gettimeofday () > give_up then
        pg_log "sweep: %d process(es) still there after 120 s" (List.length victims)
      else if unkilled <> [] then begin
        (try Unix.kill (-1) Sys.sigstop with Unix.Unix_error _ -> ());
        let victims = List.filter (fun (pid, ppid, _) -> doomed pid ppid) (pg_processes ()) in
        signal Sys.sigkill victims;
        List.iter (fun (pid, _, _) -> Hashtbl.replace killed pid ()) victims;
        (try Unix.kill (-1) Sys.sigcont with Unix.Unix_error _ -> ());
        pass ()
      end else (Unix.sleepf 0.001; pass ()) in  (* killed: exiting, or zombies their parents reap *)
    pass ()
  end

(* A forked process shares its parent's pages until one of them writes. The major GC writes
   mark bits all over the heap, so a root or zygote that collects turns the shared HOL heap into
   private copies. They allocate little, so after loading their major GC is all but switched
   off; a worker gets the normal settings back before anything runs. *)
let pg_gc_normal = ref (Gc.get ())

let pg_quiet_gc () =
  Gc.set { !pg_gc_normal with Gc.space_overhead = 1000000; Gc.max_overhead = 1000000 }

(* ------------------------------------------------------------------------------------------ *)
(* worker                                                                                      *)

let pg_worker ~verdict_fd ~out_fd ~goal ~proof ~uid ~mem_bytes ~cpu_s =
  (* The worker's own clock: from its start to the tactic's (goal, vetting, compiling), and the tactic's
     run with the theorem's checks. The client subtracts them from a check's time: what is left is the
     fork server's overhead (fork, pipes, frames, exit). Informational, never part of a verdict. *)
  let t_start = Unix.gettimeofday () in
  let t_run = ref t_start and t_done = ref 0.0 in
  let reply o =
    let reasons = List.map (pg_cap 4096) (List.filteri (fun i _ -> i < 16) o.reasons) in
    let us a b = string_of_int (int_of_float ((b -. a) *. 1e6)) in
    let abs_us t = Printf.sprintf "%.0f" (t *. 1e6) in
    let timing = if !t_done > 0.0 then us t_start !t_run ^ " " ^ us !t_run !t_done ^ " " ^ abs_us t_start ^ " "
                                       ^ abs_us (Unix.gettimeofday ()) else "" in
    pg_send verdict_fd "V" "0" [o.verdict; o.category; String.concat "\n" reasons; pg_cap pg_text_cap o.detail; o.goals;
                                timing] in
  let outcome =
    try
      Gc.set !pg_gc_normal;
      Pgsys.die_with_parent ();
      let devnull = Unix.openfile "/dev/null" [Unix.O_RDONLY] 0 in
      Unix.dup2 devnull Unix.stdin; Unix.close devnull;
      Unix.dup2 out_fd Unix.stdout; Unix.dup2 out_fd Unix.stderr; Unix.close out_fd;
      Pgsys.close_fds_except (pg_int_of_fd verdict_fd) (-1);
      (* 1. the goal, from trusted text, before anything of the submission is looked at *)
      let run = try !pg_prepare goal with
        | Failure m -> raise (Pg_reject (pg_outcome "ERROR" "goal" ["the task's goal does not parse: " ^ m]))
        | e -> raise (Pg_reject (pg_outcome "ERROR" "goal" ["the task's goal does not parse: " ^ Printexc.to_string e])) in
      (* 2. the submission: one expression of type tactic, whitelisted on both trees *)
      Location.input_name := pg_submission_name;
      let e = pg_vet_submission proof in
      (* 3. drop privileges before any submission code runs *)
      Pgsys.setrlimit 0 mem_bytes;
      Pgsys.setrlimit 1 cpu_s;
      Pgsys.setrlimit 3 0;
      Pgsys.setrlimit 5 0;
      if uid > 0 then begin
        Unix.setgroups [||]; Unix.setgid uid; Unix.setuid uid;
        Pgsys.setrlimit 2 0
      end;
      Pgsys.no_new_privs ();
      (* The thunk is compiled before seccomp closes open(): the compiler may read .cmi files. *)
      let wrapper = Ast_helper.Exp.apply
          (Ast_helper.Exp.ident (Location.mknoloc (Longident.Lident "pg_receive")))
          [Asttypes.Nolabel, Ast_helper.Exp.fun_ Asttypes.Nolabel None (Ast_helper.Pat.any ()) e] in
      pg_received := None;
      let ok = Toploop.execute_phrase false Format.err_formatter
          (Parsetree.Ptop_def [Ast_helper.Str.eval wrapper]) in
      let thunk = match !pg_received with
        | Some t when ok -> t
        | _ -> raise (Pg_reject (pg_outcome "ERROR" "type" ["the tactic could not be compiled"])) in
      (* defence in depth: where the kernel refuses a filter, the uid and the whitelist still hold *)
      (try ignore (Pgsys.seccomp_worker ()) with Failure _ -> ());
      (* 4. run it; the checks were bound in closures by step 1 *)
      t_run := Unix.gettimeofday ();
      let o = run (Obj.obj thunk) in
      t_done := Unix.gettimeofday ();
      o
    with
    | Pg_reject o -> o
    | Out_of_memory -> pg_outcome "ERROR" "resource" ["the tactic ran out of memory"]
    | Stack_overflow -> pg_outcome "ERROR" "resource" ["the tactic overflowed the stack"]
    | e -> pg_outcome "ERROR" "other" ["unexpected exception in the checker: " ^ Printexc.to_string e] in
  (* each on its own: a channel the tactic closed must not keep the verdict from going out *)
  (try flush stdout with _ -> ()); (try flush stderr with _ -> ()); (try reply outcome with _ -> ());
  (* Both pipes closed before the exit, whose teardown of the address space (a fork of the zygote: hundreds of
     MB of page tables) is the slowest part of it: the zygote answers at the verdict, then reaps (see below). *)
  List.iter (fun fd -> try Unix.close fd with _ -> ()) [verdict_fd; Unix.stdout; Unix.stderr];
  Unix._exit 0

(* ------------------------------------------------------------------------------------------ *)
(* zygote: one loaded problem context, forks workers, kills them at their deadline            *)

type pg_job = {
  jid : string; jpid : int; jverdict : Unix.file_descr; jout : Unix.file_descr; jdeadline : float;
  jstart : float; jforked : float; mutable jeof : float;
  jcpu_ms : int;  (* a CPU-time budget (0: none, the deadline is wall time); jdeadline is then its backstop *)
  jmem_kb : int; vbuf : Buffer.t; obuf : Buffer.t; mutable vdone : bool; mutable odone : bool;
  mutable killed : string; }

let pg_max_output = 65536

(* Read what is there: `Eof (writer gone), `Again (nothing now) or `Data. Bytes past [limit] are dropped. *)
let pg_drain fd buf limit =
  let chunk = pg_chunk in
  match Unix.read fd chunk 0 65536 with
  | 0 -> `Eof
  | k -> (if Buffer.length buf < limit then Buffer.add_subbytes buf chunk 0 (min k (limit - Buffer.length buf))); `Data
  | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EINTR), _, _) -> `Again
  | exception Unix.Unix_error _ -> `Eof

let pg_tail s n = if String.length s <= n then s else "..." ^ String.sub s (String.length s - n) n

(* The worker's verdict frame, read where it was collected ([buf], the job's own buffer: not copied, see
   pg_send); None if it is not one well-formed verdict. *)
let pg_parse_verdict buf =
  try
    let r = { rfd = Unix.stdin; rbuf = buf; rpos = 0; eof = true } in
    match pg_read_frame r with
    | ("V", _, [v; c; reasons; detail; goals; timing]) when List.mem v ["OK"; "FAIL"; "CHEATING"; "TIMEOUT"; "ERROR"] ->
        Some (v, c, reasons, detail, goals, timing)
    | _ -> None
  with _ -> None

let pg_zygote ~cmd_fd ~res_fd =
  let r = pg_reader cmd_fd in
  let jobs : pg_job list ref = ref [] in
  let finish j status =
    let wall_ms = int_of_float ((Unix.gettimeofday () -. j.jstart) *. 1000.) in
    let output = pg_tail (Buffer.contents j.obuf) 4000 in
    let verdict, category, reasons, detail, goals, timing =
      if j.killed = "timeout" && j.jcpu_ms > 0 then
        ("TIMEOUT", "timeout", "the tactic ran past the wall-clock backstop of its CPU-time budget and was killed",
         "", "", "")
      else if j.killed = "timeout" then ("TIMEOUT", "timeout", "the tactic ran past its deadline and was killed", "", "", "")
      else if j.killed = "cpu" then
        ("TIMEOUT", "timeout", Printf.sprintf "the worker used its %g CPU seconds and was killed"
                                 (float j.jcpu_ms /. 1000.), "", "", "")
      else if j.killed = "memory" then ("ERROR", "resource", "the tactic used more memory than allowed and was killed", "", "", "")
      else if Buffer.length j.vbuf >= pg_max_verdict then
        (* cannot happen with the caps above; if it does, say so: it is not a dead worker to retry *)
        ("ERROR", "resource", "the worker's verdict was over the frame limit and was dropped", "", "", "")
      else match pg_parse_verdict j.vbuf with
        | Some v -> v
        | None ->
            let how = match status with
              | Unix.WEXITED c -> Printf.sprintf "exited with status %d" c
              | Unix.WSIGNALED s -> "was killed by " ^ pg_signal_name s
              | Unix.WSTOPPED s -> Printf.sprintf "stopped by signal %d" s in
            ("ERROR", "resource", "the worker " ^ how ^ " without a verdict", "", "", "") in
    let messages = String.concat "\n" (List.filter (fun s -> s <> "") [detail; output]) in
    (* the zygote's clock of the same attempt, beside the worker's (see HolLightVerifier.worker_timeline) *)
    let timing = if timing = "" then "" else
        Printf.sprintf "%s %.0f %.0f %.0f %.0f" timing (j.jstart *. 1e6) (j.jforked *. 1e6) (j.jeof *. 1e6)
          (Unix.gettimeofday () *. 1e6) in
    pg_send res_fd "RESULT" j.jid [verdict; category; reasons; messages; string_of_int wall_ms; goals; timing] in
  let start_job id goal proof timeout_ms mem_bytes uid cpu_ms =
    let vr, vw = Unix.pipe ~cloexec:false () in
    let or_, ow = Unix.pipe ~cloexec:false () in
    let cpu_s = timeout_ms / 1000 + 5 in
    let before_fork = Unix.gettimeofday () in
    match Unix.fork () with
    | exception Unix.Unix_error (err, _, _) ->  (* the pids cgroup is full: this attempt fails, the zygote lives *)
        List.iter Unix.close [vr; vw; or_; ow];
        pg_send res_fd "RESULT" id ["ERROR"; "resource"; "could not start a worker: " ^ Unix.error_message err; "";
                                    "0"; ""]
    | 0 ->
        Unix.close vr; Unix.close or_; Unix.close cmd_fd; Unix.close res_fd;
        pg_worker ~verdict_fd:vw ~out_fd:ow ~goal ~proof ~uid ~mem_bytes ~cpu_s
    | pid ->
        Unix.close vw; Unix.close ow;
        Unix.set_nonblock vr; Unix.set_nonblock or_;
        let now = Unix.gettimeofday () in
        jobs := { jid = id; jpid = pid; jverdict = vr; jout = or_; jdeadline = now +. float timeout_ms /. 1000.;
                  jstart = before_fork; jforked = now; jeof = 0.0; jcpu_ms = cpu_ms; jmem_kb = mem_bytes / 1024; vbuf = Buffer.create 1024; obuf = Buffer.create 1024;
                  vdone = false; odone = false; killed = "" } :: !jobs in
  let kill j why = if j.killed = "" then j.killed <- why; (try Unix.kill j.jpid Sys.sigkill with _ -> ()) in
  while true do
    let fds = List.concat_map (fun j -> (if j.vdone then [] else [j.jverdict]) @ (if j.odone then [] else [j.jout])) !jobs in
    let now = Unix.gettimeofday () in
    let wait =
      if pg_frame_buffered r then 0.0
      else if !jobs = [] then -1.0
      (* a worker whose pipes are both closed is exiting: look for its exit status again soon, not in 50 ms *)
      else let poll = if List.exists (fun j -> j.vdone && j.odone) !jobs then 0.001 else 0.05 in
        List.fold_left (fun acc j -> min acc (max 0.0 (j.jdeadline -. now))) poll !jobs in
    let readable = match Unix.select (if pg_frame_buffered r then fds else cmd_fd :: fds) [] [] wait with
      | (rd, _, _) -> rd | exception Unix.Unix_error (Unix.EINTR, _, _) -> [] in
    if List.mem cmd_fd readable || pg_frame_buffered r then begin
      match pg_read_frame r with
      | ("CHECK", id, [goal; proof; timeout_ms; mem_bytes; uid; cpu_ms]) ->
          start_job id goal proof (int_of_string timeout_ms) (int_of_string mem_bytes) (int_of_string uid)
            (int_of_string cpu_ms)
      | ("QUIT", _, _) -> Unix._exit 0
      | (tag, _, _) -> pg_log "zygote: unknown command %s" tag
      | exception (Pg_eof | Failure _) -> List.iter (fun j -> kill j "") !jobs; Unix._exit 0
    end;
    List.iter (fun j ->
      if List.mem j.jverdict readable then begin
        j.vdone <- pg_drain j.jverdict j.vbuf pg_max_verdict = `Eof;
        if j.vdone then j.jeof <- Unix.gettimeofday ()
      end;
      if List.mem j.jout readable then j.odone <- pg_drain j.jout j.obuf pg_max_output = `Eof) !jobs;
    let now = Unix.gettimeofday () in
    List.iter (fun j ->
      if j.killed = "" && now >= j.jdeadline then kill j "timeout"
      else if j.killed = "" && j.jcpu_ms > 0 && pg_cpu_ms j.jpid >= j.jcpu_ms then kill j "cpu"
      else if j.killed = "" && pg_mem_kb (string_of_int j.jpid) "VmRSS" > j.jmem_kb then kill j "memory") !jobs;
    jobs := List.filter (fun j ->
      (* A worker is answered for once it is reaped, never before: when a check returns, nothing it ran is left
         in the server's cgroup (test_hol_sandbox's containment rule). Its pipes closed before its exit, so the
         poll above looks for the exit status every millisecond. *)
      let gone = match Unix.waitpid [Unix.WNOHANG] j.jpid with
        | (0, _) -> None | (_, st) -> Some st | exception Unix.Unix_error _ -> Some (Unix.WEXITED 255) in
      match gone with
      | None -> true
      | Some st ->
          (* read what is left: the verdict is complete once the worker is gone *)
          let rec rest fd buf limit = if pg_drain fd buf limit = `Data then rest fd buf limit in
          rest j.jverdict j.vbuf pg_max_verdict;
          rest j.jout j.obuf pg_max_output;
          Unix.close j.jverdict; Unix.close j.jout;
          finish j st; false) !jobs
  done

(* A context runs its phrases and whatever they load (needs, loadt, loads). The names all of that defines
   are judged exactly as the base's are: the same two-pass taint analysis over the same sources, in the
   order they ran (a phrase after the files it loaded), on top of the base's result. The zygote is a fork:
   the root's whitelist is untouched. *)
let pg_load_context name text =
  let phrases = pg_parse_text name text in
  let ran = ref [] in   (* newest first: `File path | `Phrase phrase *)
  List.iter (fun ph ->
    let before = !pg_loaded_files in
    let ok = Toploop.execute_phrase true Format.std_formatter ph in
    if ok then pg_record_names (pg_phrase_names ph);
    let rec added l = if l == before then [] else match l with f :: rest -> f :: added rest | [] -> [] in
    ran := `Phrase ph :: (List.map (fun f -> `File f) (added !pg_loaded_files)) @ !ran;
    if not ok then failwith "a phrase of the context failed") phrases;
  let sources = List.rev_map (function
      | `File path -> (path, pg_parse_file path)
      | `Phrase ph -> (name, [ph])) !ran in
  let defined = !pg_defined and tainted = !pg_tainted in
  let modules = Hashtbl.copy pg_modules and why = Hashtbl.copy pg_taint_why in
  let pass () = List.iter (fun (p, phrases) -> pg_current_file := p; pg_analyse_phrases phrases) sources in
  pass ();
  pg_defined := defined; pg_tainted := tainted;
  Hashtbl.reset pg_modules; Hashtbl.iter (Hashtbl.replace pg_modules) modules;
  Hashtbl.reset pg_taint_why; Hashtbl.iter (Hashtbl.replace pg_taint_why) why;
  pass ()

(* ------------------------------------------------------------------------------------------ *)
(* root                                                                                        *)

type pg_zyg = {
  zkey : string; zpid : int; zcmd : Unix.file_descr; zres : pg_reader; mutable zjobs : string list;
  mutable zloading : string option;  (* the CTX request it has not answered yet *)
  zdeadline : float;  (* when loading it must be done: the root kills it then, whatever it ignores *)
  ztimeout_s : float;
  zalarm : float;  (* the earliest time its own SIGALRM can end its load *) }

let pg_root () =
  let r = pg_reader Unix.stdin in
  let zygotes : (string, pg_zyg) Hashtbl.t = Hashtbl.create 17 in
  let uid_counter = ref 0 in
  let out tag id fields = pg_send pg_protocol_out tag id fields in
  let reap z = (try Unix.close z.zcmd with _ -> ()); (try Unix.close z.zres.rfd with _ -> ());
    (try Unix.kill z.zpid Sys.sigkill with _ -> ()); (try ignore (Unix.waitpid [] z.zpid) with _ -> ());
    Hashtbl.remove zygotes z.zkey in
  (* Anything that is not bwrap's init, the root, a zygote or a zygote's child (a worker) was left by a
     context (a fork bomb, a daemon): nothing may outlive the zygote that started it. The sweep is over
     before the root answers, so the next request finds the pids cgroup as the context found it. *)
  (* [fresh]: a zygote that just loaded, whose children are all the context's; [waiting]: the requests
     whose answer waits for this sweep (the client hears BUSY for them while it lasts) *)
  let sweep ?(fresh = -1) ?(waiting = []) () =
    let self = Unix.getpid () in
    let live = Hashtbl.fold (fun _ z acc -> z.zpid :: acc) zygotes [] in
    pg_kill_until_gone ~progress:(fun () -> List.iter (fun id -> out "BUSY" id []) waiting) (fun pid ppid ->
      pid <> 1 && pid <> self && not (List.mem pid live) && (ppid = fresh || not (List.mem ppid live))) in
  (* A zygote is gone: kill and reap it, sweep what it left, and only then answer what it owed. *)
  let lost ?(timed_out = false) z why =
    reap z; sweep ~waiting:(Option.to_list z.zloading @ z.zjobs) ();
    (match z.zloading with
     | Some id when timed_out || why = pg_signal_name Sys.sigalrm ->
         out "CTX" id ["timeout"; Printf.sprintf "the context was still loading after %.0f s, its deadline, and was killed"
                                    z.ztimeout_s; "0"; "0"; "0"]
     | Some id -> out "CTX" id ["fail"; "the context's zygote died while loading it (" ^ why ^ ")"; "0"; "0"; "0"]
     | None -> ());
    List.iter (fun id -> out "RESULT" id ["ERROR"; "resource"; "the context's zygote died during the attempt (" ^ why ^ ")"; ""; "0"; ""]) z.zjobs;
    out "ZDIED" "0" [z.zkey; why] in
  let new_zygote id key text timeout_ms =
    let started = Unix.gettimeofday () in
    let c_r, c_w = Unix.pipe ~cloexec:false () in
    let r_r, r_w = Unix.pipe ~cloexec:false () in
    match Unix.fork () with
    | exception Unix.Unix_error (err, _, _) ->
        List.iter Unix.close [c_r; c_w; r_r; r_w];
        out "CTX" id ["fail"; "could not start a zygote: " ^ Unix.error_message err; "0"; "0"; "0"]
    | 0 ->
        Pgsys.die_with_parent ();
        Unix.close c_w; Unix.close r_r;
        let devnull = Unix.openfile "/dev/null" [Unix.O_RDONLY] 0 in
        Unix.dup2 devnull Unix.stdin; Unix.close devnull;
        Unix.dup2 Unix.stderr Unix.stdout;
        Pgsys.close_fds_except (pg_int_of_fd c_r) (pg_int_of_fd r_w);
        Gc.set !pg_gc_normal;  (* loading allocates: collect normally until it is done *)
        let t = Unix.gettimeofday () in
        ignore (Unix.alarm (max 1 (timeout_ms / 1000)));  (* the zygote is trusted; the alarm bounds a stuck load *)
        (match pg_load_context ("context " ^ key) text with
         | () ->
             ignore (Unix.alarm 0);
             pg_log "context %s: loaded in %.1f s" key (Unix.gettimeofday () -. t);
             (* the zygote forks workers only: whatever the context started is killed by the root's sweep
                once this frame is in (see pg_kill_until_gone), and reaped here before the first worker *)
             Format.print_flush (); Format.pp_print_flush Format.err_formatter (); flush stdout; flush stderr;
             pg_quiet_gc ();
             let self = string_of_int (Unix.getpid ()) in
             pg_send r_w "CTX" id ["ok"; ""; string_of_int (pg_mem_kb self "VmRSS"); string_of_int (pg_private_kb self);
                                    string_of_int (int_of_float ((Unix.gettimeofday () -. t) *. 1000.))];
             let rec reap_children () =
               match Unix.waitpid [] (-1) with
               | _ -> reap_children ()
               | exception Unix.Unix_error (Unix.EINTR, _, _) -> reap_children ()
               | exception Unix.Unix_error _ -> () in   (* ECHILD: none left *)
             if pg_own_pid_ns then reap_children ()
             else (try while fst (Unix.waitpid [Unix.WNOHANG] (-1)) > 0 do () done with Unix.Unix_error _ -> ());
             pg_zygote ~cmd_fd:c_r ~res_fd:r_w
         | exception e ->
             pg_send r_w "CTX" id ["fail"; pg_error_text e; "0"; "0"; "0"];
             Unix._exit 1)
    | pid ->
        Unix.close c_r; Unix.close r_w;
        Hashtbl.replace zygotes key
          { zkey = key; zpid = pid; zcmd = c_w; zres = pg_reader r_r; zjobs = []; zloading = Some id;
            zdeadline = Unix.gettimeofday () +. float timeout_ms /. 1000. +. 2.0;
            ztimeout_s = float timeout_ms /. 1000.; zalarm = started +. float (max 1 (timeout_ms / 1000)) } in
  while true do
    let zs = Hashtbl.fold (fun _ z acc -> z :: acc) zygotes [] in
    let buffered = pg_frame_buffered r || List.exists (fun z -> pg_frame_buffered z.zres) zs in
    let now = Unix.gettimeofday () in
    let wait = List.fold_left (fun acc z ->
        if z.zloading = None then acc else let left = max 0.0 (z.zdeadline -. now) in if acc < 0.0 then left else min acc left)
        (if buffered then 0.0 else -1.0) zs in
    let readable = match Unix.select (Unix.stdin :: List.map (fun z -> z.zres.rfd) zs) [] [] wait with
      | (rd, _, _) -> rd | exception Unix.Unix_error (Unix.EINTR, _, _) -> [] in
    if List.mem Unix.stdin readable || pg_frame_buffered r then begin
      match pg_read_frame r with
      | ("CTX", id, [key; text; timeout_ms]) ->
          (match Hashtbl.find_opt zygotes key with Some z -> reap z | None -> ());
          Format.print_flush (); Format.pp_print_flush Format.err_formatter (); flush stdout; flush stderr;
          new_zygote id key text (int_of_string timeout_ms)
      | ("CHECK", id, ([key; goal; proof; timeout_ms; mem_bytes] | [key; goal; proof; timeout_ms; mem_bytes; _]
                       as fields)) ->
          (* the sixth field, where there is one, is a CPU-time budget (HolLightConfig.timeout_clock="cpu") *)
          let cpu_ms = match fields with [_; _; _; _; _; c] -> c | _ -> "0" in
          (match Hashtbl.find_opt zygotes key with
           | None -> out "RESULT" id ["ERROR"; "resource"; "no zygote for this context (it was evicted or died)"; ""; "0"; ""]
           | Some z ->
               incr uid_counter;
               let uid = if !pg_uid_separation then PG_CONFIG_uid_base + (!uid_counter mod 60000) else 0 in
               z.zjobs <- id :: z.zjobs;
               (try pg_send z.zcmd "CHECK" id [goal; proof; timeout_ms; mem_bytes; string_of_int uid; cpu_ms]
                with _ -> lost z "its command pipe is closed"))
      | ("EVICT", id, [key]) ->
          (match Hashtbl.find_opt zygotes key with
           | Some z ->
               (* attempts still running there are asked again by the client, on a fresh zygote *)
               List.iter (fun j -> out "RESULT" j ["ERROR"; "resource"; "no zygote for this context (it was evicted)"; ""; "0"; ""]) z.zjobs;
               (try pg_send z.zcmd "QUIT" "0" [] with _ -> ()); reap z; sweep ()
           | None -> ());
          out "EVICTED" id [key]
      | ("STATS", id, []) ->
          let self = string_of_int (Unix.getpid ()) in
          let lines = Hashtbl.fold (fun _ z acc ->
              let p = string_of_int z.zpid in
              Printf.sprintf "%s %d %d" z.zkey (pg_mem_kb p "VmRSS") (pg_private_kb p) :: acc) zygotes
              [Printf.sprintf "root %d %d" (pg_mem_kb self "VmRSS") (pg_private_kb self)] in
          out "STATS" id [String.concat "\n" lines]
      | ("QUIT", _, _) -> Hashtbl.iter (fun _ z -> (try Unix.kill z.zpid Sys.sigkill with _ -> ())) zygotes; exit 0
      | (tag, id, _) -> out "BAD" id ["unknown command " ^ tag]
      | exception (Pg_eof | Failure _) -> Hashtbl.iter (fun _ z -> (try Unix.kill z.zpid Sys.sigkill with _ -> ())) zygotes; exit 0
    end;
    List.iter (fun z ->
      if List.mem z.zres.rfd readable || pg_frame_buffered z.zres then
        match pg_read_frame z.zres with
        | (tag, id, fields) ->
            if tag = "RESULT" then begin
              z.zjobs <- List.filter (fun j -> j <> id) z.zjobs;
              (* the pids cgroup was full: clear out what holds it before the client asks again *)
              (match fields with
               | _ :: _ :: reason :: _ when pg_find_sub reason "could not start a worker" 0 = 0 -> sweep ~waiting:[id] ()
               | _ -> ())
            end;
            if tag = "CTX" then begin
              z.zloading <- None;
              if List.hd fields <> "ok" then (reap z; sweep ~waiting:[id] ()) else sweep ~fresh:z.zpid ~waiting:[id] ()
            end;
            out tag id fields
        | exception (Pg_eof | Failure _) ->
            let why = match Unix.waitpid [Unix.WNOHANG] z.zpid with
              | (0, _) -> "closed its pipe"
              | (_, Unix.WEXITED c) -> Printf.sprintf "exit %d" c
              | (_, Unix.WSIGNALED s) -> pg_signal_name s
              | _ -> "stopped"
              | exception _ -> "gone" in
            (* its alarm cannot fire before zalarm: a zygote that dies loading after that ran out of time *)
            if Hashtbl.mem zygotes z.zkey then
              lost ~timed_out:(z.zloading <> None && Unix.gettimeofday () >= z.zalarm) z why) zs;
    let now = Unix.gettimeofday () in
    List.iter (fun z ->
      if z.zloading <> None && now >= z.zdeadline && Hashtbl.mem zygotes z.zkey then begin
        (* its own alarm did not end it (a context may ignore SIGALRM): SIGKILL cannot be ignored *)
        pg_log "context %s: still loading at its deadline; killed" z.zkey;
        (try Unix.kill z.zpid Sys.sigkill with Unix.Unix_error _ -> ());
        lost ~timed_out:true z "it ran past the context's deadline and was killed"
      end) zs
  done

(* ------------------------------------------------------------------------------------------ *)
(* start-up                                                                                    *)

let () =
  try
    Sys.catch_break false;
    (try Pgsys.setrlimit 5 0 with _ -> ());
    pg_uid_separation := PG_CONFIG_uid_separation;
    if PG_CONFIG_prelude <> "" then pg_use PG_CONFIG_prelude;
    let hol_ml = Filename.concat PG_CONFIG_hol_dir "hol.ml" in
    let patched = Filename.concat PG_CONFIG_workdir "hol_patched.ml" in
    pg_write_file patched (pg_patch_hol_ml (pg_read_file hol_ml));
    pg_note_file hol_ml;
    pg_use patched;
    if PG_CONFIG_cwd <> "" then Sys.chdir PG_CONFIG_cwd;
    if PG_CONFIG_setup <> "" then begin pg_note_file PG_CONFIG_setup; pg_use PG_CONFIG_setup end;
    pg_use PG_CONFIG_server;
    pg_note_data_types ();
    if !pg_data_pending <> [] then pg_log "whitelist: types %s not found: not data" (String.concat ", " !pg_data_pending);
    pg_data_final := true;
    let t = Unix.gettimeofday () in
    pg_analyse_files (List.rev !pg_loaded_files);
    let n_allowed = SS.cardinal (SS.filter pg_allowed !pg_defined) in
    pg_log "whitelist: %d names allowed, %d tainted (%.1f s)" n_allowed
      (SS.cardinal (SS.inter !pg_defined !pg_tainted)) (Unix.gettimeofday () -. t);
    if (Filename.concat PG_CONFIG_workdir "whitelist.tsv") <> "" then begin
      let oc = open_out (Filename.concat PG_CONFIG_workdir "whitelist.tsv") in
      SS.iter (fun n ->
        Printf.fprintf oc "%s\t%s\n" n
          (if pg_allowed n then "allowed"
           else if pg_denied_name n then "denied"
           else "tainted by " ^ (try Hashtbl.find pg_taint_why n with Not_found -> "?"))) !pg_defined;
      close_out oc
    end;
    Gc.compact ();
    let self = string_of_int (Unix.getpid ()) in
    pg_send pg_protocol_out "READY" "0"
      [PG_CONFIG_nonce; !pg_hol_version; Sys.ocaml_version; string_of_int (int_of_float ((Unix.gettimeofday () -. pg_t0) *. 1000.));
       string_of_int (pg_mem_kb self "VmRSS"); string_of_int n_allowed; (if !pg_uid_separation then "1" else "0")];
    pg_gc_normal := Gc.get ();
    pg_quiet_gc ()
  with e ->
    let msg = pg_error_text e in
    (try pg_send pg_protocol_out "LOADFAIL" "0" [msg] with _ -> ());
    exit 2

let () = pg_root ()
