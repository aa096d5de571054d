(* proofgym: s2n-bignum-bench's query obfuscation, with a printer of proofgym's own.

   Loaded as text at the end of a task's context (HOL Light syntax: no backquotes in this file).
   The bench reprints a query with HOL Light's print_types_of_subterms := 2 (the type of every
   variable and constant shown) after naming the type checker's invented type variables
   bench_arbty0, bench_arbty1 ... and renaming the bound variables that read back as constants;
   tier 2 also renames every bound variable, v<seed>, v<seed+1> ... The reprint is used only if
   it parses back alpha-equivalent (aconv) to the renamed term. HOL Light 20230128 has no
   print_types_of_subterms, so the types are printed by a user printer for atoms: the standard
   printer consults user printers for every subterm first, so every variable and constant that
   it prints as an atom comes out as (name:type), the rest of the layout is the printer's own. *)

let pg_obf_result = ref "";;

(* The type checker's invented type variables (named "?N"), distinct, in OCaml's order. *)
let pg_obf_invented_types tm =
  let rec of_type acc ty =
    if is_vartype ty then
      let s = dest_vartype ty in
      if String.length s > 0 && String.get s 0 = '?' && not (List.mem ty acc) then ty :: acc else acc
    else List.fold_left of_type acc (snd (dest_type ty)) in
  let rec of_term acc t =
    if is_var t then of_type acc (snd (dest_var t))
    else if is_const t then of_type acc (snd (dest_const t))
    else if is_comb t then of_term (of_term acc (rator t)) (rand t)
    else let v, b = dest_abs t in of_term (of_term acc v) b in
  List.sort compare (of_term [] tm);;

(* The bench numbers them from the last in that order: the last invented one is bench_arbty0. *)
let pg_obf_name_invented_types tm =
  let rec theta i tys =
    match tys with
      [] -> []
    | ty :: rest -> (mk_vartype ("bench_arbty" ^ string_of_int i), ty) :: theta (i + 1) rest in
  match theta 0 (List.rev (pg_obf_invented_types tm)) with
    [] -> tm
  | th -> inst th tm;;

(* Every variable name in tm, free or bound: a fresh bound name must be none of them. *)
let pg_obf_variable_names tm =
  let rec names acc t =
    if is_var t then
      let n = fst (dest_var t) in if List.mem n acc then acc else n :: acc
    else if is_const t then acc
    else if is_comb t then names (names acc (rator t)) (rand t)
    else let v, b = dest_abs t in names (names acc v) b in
  names [] tm;;

(* Rename the bound variables that [pick] selects to v<n>, v<n+1> ... from [first], skipping names
   that are variables of tm or constants; bound occurrences follow their binder. *)
let pg_obf_rename_binders (pick : term -> bool) (first : int) tm =
  let avoid = pg_obf_variable_names tm in
  let counter = ref first in
  let rec fresh ty =
    let n = "v" ^ string_of_int !counter in
    counter := !counter + 1;
    if List.mem n avoid || can get_const_type n then fresh ty else mk_var (n, ty) in
  let rec walk env t =
    if is_var t then (try List.assoc t env with Not_found -> t)
    else if is_const t then t
    else if is_comb t then mk_comb (walk env (rator t), walk env (rand t))
    else
      let v, b = dest_abs t in
      if pick v then let v' = fresh (type_of v) in mk_abs (v', walk ((v, v') :: env) b)
      else mk_abs (v, walk (List.remove_assoc v env) b) in
  walk [] tm;;

(* A bound variable whose name is a constant's reads back as that constant. *)
let pg_obf_reads_as_constant v = can get_const_type (fst (dest_var v));;

(* The name the printer shows for a constant: the interface's, as HOL Light's printer finds it. *)
let pg_obf_shown_name (name, ty) =
  if not !reverse_interface_mapping then name else
  try fst (List.find (fun (_, (c, cty)) -> c = name && can (type_match cty ty) []) !the_interface)
  with Not_found -> name;;

(* The user printer for atoms: (name:type). The empty set and the universe keep their own syntax, as
   in HOL Light's printer; a name that is an operator is parenthesised, and a space keeps a
   symbolic name from lexing together with the colon. *)
let pg_obf_print_atom fmt tm =
  if not (is_var tm || is_const tm) then failwith "not an atom" else
  let name, ty = if is_var tm then dest_var tm else dest_const tm in
  let shown = if is_const tm then pg_obf_shown_name (name, ty) else name in
  if is_const tm && (shown = "EMPTY" || (shown = "UNIV" && !typify_universal_set)) then
    failwith "printed as a set" else
  let s = if parses_as_binder shown || can get_infix_status shown || is_prefix shown
          then "(" ^ shown ^ ")" else shown in
  let colon = if s <> "" && issymb (String.sub s (String.length s - 1) 1) then " :" else ":" in
  Format.pp_print_string fmt ("(" ^ s ^ colon ^ string_of_type ty ^ ")");;

(* Printed on a formatter of its own: string_of_term's stops at 100 nested boxes (an s2n-bignum
   specification nests deeper), and what it elides would not parse back. *)
let pg_obf_string_of_term tm =
  let buf = Buffer.create 4096 in
  let fmt = Format.formatter_of_buffer buf in
  Format.pp_set_max_boxes fmt max_int;
  Format.pp_set_margin fmt (get_margin ());
  install_user_printer ("pg_obf_atoms", pg_obf_print_atom);
  (try pp_print_term fmt tm with e -> (delete_user_printer "pg_obf_atoms"; raise e));
  delete_user_printer "pg_obf_atoms";
  Format.pp_print_flush fmt ();
  Buffer.contents buf;;

(* "OBFUSCATED\n<text>", or "ROUNDTRIP\n<text>" (it parses to a term that is not alpha-equivalent),
   or "NOPARSE\n<why>\n<text>"; [tier] 1 or 2, [seed] tier 2's first bound-variable number. *)
let pg_obfuscate (tier : int) (seed : int) tm =
  let t1 = pg_obf_rename_binders pg_obf_reads_as_constant 0 (pg_obf_name_invented_types tm) in
  let t2 = if tier >= 2 then pg_obf_rename_binders (fun _ -> true) seed t1 else t1 in
  let text = pg_obf_string_of_term t2 in
  let back, why =
    try [parse_term text], "" with
      Failure m -> [], m
    | Noparse -> [], "Noparse"
    | e -> [], Printexc.to_string e in
  match back with
    [b] -> (if aconv b t2 then "OBFUSCATED\n" else "ROUNDTRIP\n") ^ text
  | _ -> "NOPARSE\n" ^ String.escaped why ^ "\n" ^ text;;

(* The verifier's goal channel carries the result: the goal pg_obfuscation_output prints as it. *)
install_user_printer ("pg_obf_output", fun fmt tm ->
  if is_var tm && fst (dest_var tm) = "pg_obfuscation_output"
  then Format.pp_print_string fmt (string_of_int (String.length !pg_obf_result) ^ "\n" ^ !pg_obf_result)
  else failwith "not the output");;
