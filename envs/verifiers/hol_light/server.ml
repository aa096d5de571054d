(* proofgym: the HOL-side half of the fork server (HOL Light syntax: loaded after hol.ml).

   Every HOL function the verdict depends on is bound here, once, before any context or
   submission is loaded: a submission that rebinds prove, axioms or aconv (after a double
   semicolon, which the parse check refuses anyway) cannot reach these closures.
   No backquotes and no polymorphic variants here: pa_j reads a backquote as a term quotation. *)

exception Pg_done of pg_outcome;;

let pg_receive (f : unit -> tactic) = pg_received := Some (Obj.repr f);;

pg_hol_version := hol_version;;

let pg_prepare_impl =
  let parse_term = parse_term and type_of = type_of and bool_ty = bool_ty and axioms = axioms
  and concl = concl and hyp = hyp and aconv = aconv and null_inst = null_inst
  and string_of_term = string_of_term and constants = constants and types = types in
  let outcome v c rs detail goals =
    { verdict = v; category = c; reasons = rs; detail = detail; goals = goals } in
  let show_goal (asl, w) () = (List.map (fun (_, th) -> string_of_term (concl th)) asl, string_of_term w) in
  let failed what e =
    match e with
      Failure m -> outcome "FAIL" "logic" [what ^ " failed: " ^ m] "" ""
    | Out_of_memory -> outcome "ERROR" "resource" [what ^ " ran out of memory"] "" ""
    | Stack_overflow -> outcome "ERROR" "resource" [what ^ " overflowed the stack"] "" ""
    | e -> outcome "ERROR" "other" [what ^ " raised an unexpected exception: " ^ Printexc.to_string e] "" "" in
  fun goal_text ->
    let g = parse_term goal_text in
    if type_of g <> bool_ty then failwith "the goal is not a boolean term" else
    let ax0 = axioms () and consts0 = constants () and types0 = types () in
    fun thunk ->
      let attempt () =
        let tac = try (Obj.obj (thunk ()) : tactic)
                  with e -> raise (Pg_done (failed "evaluating the tactic" e)) in
        let (_, gls, just) = try tac ([], g) with e -> raise (Pg_done (failed "the tactic" e)) in
        if gls <> [] then
          raise (Pg_done (outcome "FAIL" "logic" [Printf.sprintf "%d goal(s) remain" (List.length gls)] ""
                            (pg_encode_goals (List.map show_goal gls)))) else
        let th = try just null_inst [] with e -> raise (Pg_done (failed "the justification" e)) in
        let ax1 = axioms () in
        let same_axioms = List.length ax1 = List.length ax0 && List.for_all2 (fun a b -> a == b) ax1 ax0 in
        (* A definition is conservative, but the policy is that a proof does not extend the theory: the
           whitelist keeps every path to the kernel's new_constant / new_type away, and this catches any. *)
        let same_theory = constants () == consts0 && types () == types0 in
        let reasons =
          (if same_axioms then [] else ["axioms() changed during the proof"])
          @ (if same_theory then [] else ["the proof extended the theory with a new constant or type: definitions are refused"])
          @ (if hyp th = [] then [] else ["the theorem has hypotheses"])
          @ (if aconv (concl th) g then [] else ["the theorem's conclusion is not the goal"]) in
        if reasons = [] then outcome "OK" "none" [] "" ""
        else outcome "CHEATING" "cheating" reasons "" "" in
      try attempt () with Pg_done result -> result;;

pg_prepare := pg_prepare_impl;;
