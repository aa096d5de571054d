"""Prover tier, trust round 3 (issue 12) for HOL Light: sound and fair verdicts on the real fork server.

- soundness: no submission extends the theory (``define_quotient_type`` and every other path to the
  kernel's ``new_constant``/``new_type``), whether the whitelist sees the path or not;
- fairness: names a context loads (``needs``) are judged by the same taint analysis as the base; names
  are refused by taint and provenance, never by substring; plain data (an s2n-bignum style ``*_EXEC``
  tuple built from a value that read a file) is usable; goalstack scripts and comments after ``;;``
  are normalised, never CHEATING;
- the server: a verdict frame that would pass 1 MiB stays a FAIL with its goals (counted exactly), and
  goals are length-prefixed, so no term can forge one.

Shares the session's warm server (``hol`` in conftest.py). The ``needs "Library/prime.ml"`` context loads
once (a minute or two) and is reused by every test that names it.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.hol_light import DEFAULT_HOL_DIR, hol_light_installed

pytestmark = [
    pytest.mark.prover,
    pytest.mark.skipif(not hol_light_installed(),
                       reason="HOL Light is not installed: run `make setup` (apt-get install hol-light libnum-ocaml-dev)"),
]


def T(goal: str, context: str = "", *, timeout: float = 60.0) -> Task:
    return Task(id="trust", system="hol_light", context=context, statement=f"`{goal}`", reference_proof="ALL_TAC",
                timeout_s=timeout)


def check(hol, task: Task, proof: str, verdict: Verdict):
    result = hol.check(task, proof)
    assert result.verdict is verdict, (proof, result)
    return result


# ---------------------------------------------------------------------------------------------
# soundness: the theory is not extended

#: Each one defines a constant or a type from inside the proof, then proves the (true) goal.
EXTENSIONS = [
    pytest.param('(ignore (define_quotient_type "pgq" ("mk_pgq", "dest_pgq") `(=):num->num->bool`); ARITH_TAC)',
                 id="define_quotient_type"),
    pytest.param("(ignore (new_definition `pg_zz = 1`); ARITH_TAC)", id="new_definition"),
    pytest.param("(ignore (define `zzf (n:num) = n + 1`); ARITH_TAC)", id="define"),
    pytest.param("(ignore (new_basic_definition `zzb = 2`); ARITH_TAC)", id="new_basic_definition"),
    pytest.param('(ignore (new_type_definition "zzt" ("mk_zzt", "dest_zzt") (prove(`?x:bool. x`, MESON_TAC[])));'
                 " ARITH_TAC)", id="new_type_definition"),
    pytest.param("(ignore (new_specification [\"zzs\"] (prove(`?x:num. x = 1`, MESON_TAC[]))); ARITH_TAC)",
                 id="new_specification"),
    pytest.param("(ignore (new_recursive_definition num_RECURSION `zzr 0 = 0 /\\ zzr (SUC n) = zzr n`); ARITH_TAC)",
                 id="new_recursive_definition"),
    pytest.param("(ignore (new_inductive_definition `zzi 0 /\\ (!n. zzi n ==> zzi (SUC n))`); ARITH_TAC)",
                 id="new_inductive_definition"),
    pytest.param("(ignore lift_function; ARITH_TAC)", id="lift_function"),
    pytest.param("(ignore lift_theorem; ignore define_quotient_type; ARITH_TAC)", id="quotient-package"),
    pytest.param('(ignore (new_constant ("pgc", `:num`)); ARITH_TAC)', id="new_constant"),
    pytest.param('(ignore (new_type ("pgty", 0)); ARITH_TAC)', id="new_type"),
    pytest.param("let f = new_definition in (ignore (f `pgzz = 3`); ARITH_TAC)", id="new_definition-aliased"),
    pytest.param("(ignore (List.map new_definition [`pgzl = 3`]); ARITH_TAC)", id="new_definition-in-a-list"),
]


@pytest.mark.parametrize("proof", EXTENSIONS)
def test_a_proof_may_not_extend_the_theory(hol, proof):
    """The whitelist refuses every path to the kernel's new_constant/new_type (they seed the taint)."""
    result = check(hol, T("1 + 1 = 2"), proof, Verdict.CHEATING)
    assert result.reasons


#: A context hides a definition behind a clean-looking tactic (a Hashtbl write, which the taint analysis of
#: trusted code does not follow): the whitelist lets SNEAK_TAC through, the theory check after the proof does not.
SNEAKY_CONTEXT = """
let pg_stash_def = Hashtbl.create 1;;
Hashtbl.replace pg_stash_def 0 (fun () -> ignore (new_definition `sneaky_c = 1`));;
let stash = pg_stash_def;;
let SNEAK_TAC g = (Hashtbl.find stash 0 ()); ALL_TAC g;;
let stash_type = Hashtbl.create 1;;
Hashtbl.replace stash_type 0 (fun () -> ignore (new_type ("sneaky_t", 0)));;
let SNEAK_TYPE_TAC g = (Hashtbl.find stash_type 0 ()); ALL_TAC g;;
"""


@pytest.mark.parametrize("proof", ["SNEAK_TAC THEN ARITH_TAC", "SNEAK_TYPE_TAC THEN ARITH_TAC"])
def test_a_theory_extension_the_whitelist_cannot_see_is_caught_after_the_proof(hol, proof):
    result = check(hol, T("1 + 1 = 2", SNEAKY_CONTEXT), proof, Verdict.CHEATING)
    assert any("extended the theory" in r for r in result.reasons), result
    check(hol, T("1 + 1 = 2", SNEAKY_CONTEXT), "ARITH_TAC", Verdict.OK)  # the context itself is fine


# ---------------------------------------------------------------------------------------------
# fairness: by taint and provenance, not by substring

OWN_LEMMAS = """
let axiom_or = prove(`!p. p \\/ ~p`, MESON_TAC[]);;
let new_lemma = prove(`!n. n + 0 = n`, ARITH_TAC);;
let NO_CHEAT_THM = prove(`!m n. m + n = n + m`, ARITH_TAC);;
let unsafe_looking_TAC = MESON_TAC[axiom_or];;
let new_tac = REWRITE_TAC[new_lemma];;
let cheat_count = 3;;
"""


@pytest.mark.parametrize(("goal", "proof"), [
    ("q \\/ ~q", "MATCH_ACCEPT_TAC axiom_or"),
    ("!n. n + 0 = n", "ACCEPT_TAC new_lemma"),
    ("a + b = b + a", "MATCH_ACCEPT_TAC NO_CHEAT_THM"),
    ("r \\/ ~r", "unsafe_looking_TAC"),
    ("x + 0 = x", "new_tac"),
    ("3 = 3", "(ignore cheat_count; REFL_TAC)"),
    ("1 + 1 = 2", "ARITH_TAC"),
])
def test_the_tasks_own_lemmas_are_usable_whatever_their_names(hol, goal, proof):
    check(hol, T(goal, OWN_LEMMAS), proof, Verdict.OK)


@pytest.mark.parametrize(("proof", "verdict"), [
    ("CHEAT_TAC", Verdict.CHEATING), ("ACCEPT_TAC (mk_thm([], `1 + 1 = 3`))", Verdict.CHEATING),
    ("ACCEPT_TAC (new_axiom `1 + 1 = 3`)", Verdict.CHEATING), ("(the_axioms := []; ALL_TAC)", Verdict.CHEATING),
    # issue 26: a local binding is the proof's own value whatever its name (this one is ALL_TAC), and a local
    # named like a root is no reason to refuse an honest proof
    ("let CHEAT_TAC = ALL_TAC in CHEAT_TAC", Verdict.FAIL),
])
def test_the_roots_stay_refused_next_to_lemmas_named_like_them(hol, proof, verdict):
    check(hol, T("1 + 1 = 3", OWN_LEMMAS), proof, verdict)


@pytest.mark.parametrize("proof", ["let output = ARITH_TAC in output", "let exit = ARITH_TAC in exit",
                                   "let mk_thm = ARITH_RULE in ACCEPT_TAC (mk_thm `1 + 1 = 2`)"])
def test_a_local_named_like_a_root_is_the_proofs_own_value(hol, proof):
    """Issue 26: was CHEATING ('uses output, which is never allowed'); the typed tree knows the binding is local."""
    check(hol, T("1 + 1 = 2", OWN_LEMMAS), proof, Verdict.OK)


#: A context that wraps the roots in innocent names: tainted, so refused; the roots stay roots even where a
#: context redefines one (the seed is the name).
WRAPPING_CONTEXT = """
let my_tac = CHEAT_TAC;;
let my_oracle (asl, w) = ACCEPT_TAC (mk_thm ([], w)) (asl, w);;
let my_reader = string_of_file;;
let my_definer t = new_definition t;;
let mk_thm_safe = mk_thm;;
"""


@pytest.mark.parametrize("proof", ["my_tac", "my_oracle", "(ignore (my_reader \"/etc/hostname\"); ALL_TAC)",
                                   "(ignore (my_definer `zzw = 1`); ALL_TAC)",
                                   "ACCEPT_TAC (mk_thm_safe ([], `1 + 1 = 3`))"])
def test_a_contexts_wrappers_of_the_roots_are_tainted(hol, proof):
    check(hol, T("1 + 1 = 3", WRAPPING_CONTEXT), proof, Verdict.CHEATING)


PRIME = 'needs "Library/prime.ml";;\n'


@pytest.mark.parametrize(("goal", "proof"), [
    ("prime 2", "REWRITE_TAC[PRIME_2]"),
    ("~prime 1 /\\ prime 2", "REWRITE_TAC[PRIME_1; PRIME_2]"),
    ("coprime(12, 35)", "CONV_TAC COPRIME_CONV"),
    ("!p. prime p ==> ~(p = 1)", "MESON_TAC[PRIME_1]"),
    ("!a b. a divides b /\\ b divides a ==> a = b", "MESON_TAC[DIVIDES_ANTISYM]"),
])
def test_a_library_the_context_needs_is_judged_like_the_base(hol, goal, proof):
    """Honest proofs with the theorems and conversions of Library/prime.ml (loaded by the context) are OK."""
    check(hol, T(goal, PRIME, timeout=120), proof, Verdict.OK)


@pytest.mark.parametrize("proof", ["CHEAT_TAC", "(ignore (string_of_file \"/etc/hostname\"); ALL_TAC)",
                                   "ACCEPT_TAC (mk_thm([], `prime 4`))"])
def test_a_library_context_does_not_open_the_roots(hol, proof):
    check(hol, T("prime 4", PRIME, timeout=120), proof, Verdict.CHEATING)


#: A context that writes a small library and loads it: what the file defines is judged like the base.
LOADED_LIBRARY = """
file_of_string "/tmp/pg_trust_lib.ml"
  "let lib_reader p = string_of_file p;;\\nlet LIB_THM = ARITH_RULE `1 + 1 = 2`;;\\nlet lib_tac = ARITH_TAC;;\\n";;
loadt "/tmp/pg_trust_lib.ml";;
"""


@pytest.mark.parametrize(("proof", "verdict"), [
    ("ACCEPT_TAC LIB_THM", Verdict.OK),
    ("lib_tac", Verdict.OK),
    ('(ignore (lib_reader "/etc/hostname"); lib_tac)', Verdict.CHEATING),
])
def test_a_file_the_context_loads_is_judged_like_the_base(hol, proof, verdict):
    check(hol, T("1 + 1 = 2", LOADED_LIBRARY), proof, verdict)


#: The shape of an s2n-bignum functional-correctness task: the context reads a routine's bytes from a file
#: (I/O, so everything computed from them is tainted), defines the machine code as a constant and builds an
#: *_EXEC tuple of theorems from it; a proof uses the tuple. Plain data: usable. The reader: refused.
S2N_CONTEXT = f"""
let fst3 (a, _, _) = a;;
let read_object_file path = let ic = open_in_bin path in let n = in_channel_length ic in
  let s = really_input_string ic n in close_in ic; s;;
let routine_bytes = String.sub (read_object_file "{DEFAULT_HOL_DIR}/hol.ml") 0 4;;
let routine_mc_term = mk_flist (map (fun c -> mk_small_numeral (Char.code (String.get c 0))) (explode routine_bytes));;
let routine_mc = new_definition (mk_eq (mk_var ("routine_mc", type_of routine_mc_term), routine_mc_term));;
let ROUTINE_EXEC = (routine_mc, [| Some (REFL routine_mc_term); None |], [routine_bytes]);;
let ROUTINE_LENGTH = prove(`LENGTH routine_mc = 4`, REWRITE_TAC[fst3 ROUTINE_EXEC; LENGTH] THEN ARITH_TAC);;
let decode_tac = REWRITE_TAC[fst3 ROUTINE_EXEC];;
"""


@pytest.mark.parametrize(("proof", "verdict"), [
    ("REWRITE_TAC[(fun (th, _, _) -> th) ROUTINE_EXEC; LENGTH] THEN ARITH_TAC", Verdict.OK),
    ("MP_TAC ROUTINE_LENGTH THEN REWRITE_TAC[]", Verdict.OK),
    ("(ignore (String.length (List.hd ((fun (_, _, s) -> s) ROUTINE_EXEC))); "
     "REWRITE_TAC[fst3 ROUTINE_EXEC; LENGTH] THEN ARITH_TAC)", Verdict.OK),
    ("REWRITE_TAC[fst3 ROUTINE_EXEC; LENGTH] THEN ARITH_TAC", Verdict.OK),
    # the function that did the I/O is code: calling it from a proof is refused
    ('(ignore (read_object_file "/etc/hostname"); REWRITE_TAC[fst3 ROUTINE_EXEC; LENGTH] THEN ARITH_TAC)',
     Verdict.CHEATING),
    # a tactic built from that data is no more able to run I/O than the data itself
    ("decode_tac THEN REWRITE_TAC[LENGTH] THEN ARITH_TAC", Verdict.OK),
])
def test_plain_data_built_from_io_is_usable_and_the_io_is_not(hol, proof, verdict):
    check(hol, T("LENGTH routine_mc = 4", S2N_CONTEXT), proof, verdict)


#: The shape of every extracted library task: earlier lemmas are CHEAT_TAC (tainted data), and the file goes on
#: to define tactics and conversions from them. A lemma bound twice is still data both times. A tainted function
#: later shadowed by data is not: what was defined from it in between calls the function.
EXTRACTED_CONTEXT = """
let HALF_LEMMA = prove(`!n. n + n = 2 * n`, CHEAT_TAC);;
let TWICE_LEMMA = prove(`!n. 2 * n = n + n`, CHEAT_TAC);;
let TWICE_LEMMA = prove(`!n. 2 * n = n + n`, CHEAT_TAC);;
let HALF_TAC = REWRITE_TAC[HALF_LEMMA];;
let TWICE_CONV = REWRITE_CONV[TWICE_LEMMA];;
let reader = string_of_file;;
let read_twice p = reader p ^ reader p;;
let reader = TRUTH;;
"""


@pytest.mark.parametrize(("goal", "proof", "verdict"), [
    ("x + x = 2 * x", "HALF_TAC", Verdict.OK),
    ("2 * y = y + y", "CONV_TAC TWICE_CONV", Verdict.OK),
    ("2 * y = y + y", "MATCH_ACCEPT_TAC TWICE_LEMMA", Verdict.OK),
    ("1 + 1 = 2", '(ignore (read_twice "/etc/hostname"); ARITH_TAC)', Verdict.CHEATING),
    ("1 + 1 = 2", "(ignore reader; ARITH_TAC)", Verdict.OK),  # the live binding is TRUTH
])
def test_taint_flows_through_code_not_through_data(hol, goal, proof, verdict):
    check(hol, T(goal, EXTRACTED_CONTEXT), proof, verdict)


#: Values with an arrow somewhere inside, or a type that only looks like data, computed from I/O.
HIDDEN_CODE_CONTEXT = """
let io_thunks = [fun () -> ignore (string_of_file "/etc/hostname")];;
type box = { run : unit -> unit };;
let io_box = { run = fun () -> ignore (string_of_file "/etc/hostname") };;
let io_lazy = lazy (string_of_file "/etc/hostname");;
type term = Sneak of (unit -> unit);;
let io_term = Sneak (fun () -> ignore (string_of_file "/etc/hostname"));;
let io_ref = ref (string_of_file "/etc/hostname");;
"""


@pytest.mark.parametrize("proof", [
    "(List.hd io_thunks (); ARITH_TAC)",
    "(io_box.run (); ARITH_TAC)",
    "(ignore (match io_lazy with lazy s -> s); ARITH_TAC)",
    "((fun (Sneak f) -> f ()) io_term; ARITH_TAC)",
    "(ignore (!io_ref); ARITH_TAC)",
])
def test_tainted_values_that_are_not_plain_data_stay_refused(hol, proof):
    check(hol, T("1 + 1 = 2", HIDDEN_CODE_CONTEXT), proof, Verdict.CHEATING)


# ---------------------------------------------------------------------------------------------
# issue 26: three classes, one verdict each (boot.ml "the policy": CHEATING only with a reason that says what the
# construct could do; the harmless Stdlib an honest proof uses is run; anything unlisted is ERROR saying what is allowed)

#: Honest habits: printing progress, formatting a failure message, memoising, timing, a query, a hint. Each a
#: correct proof: OK (each was CHEATING before issue 26).
HARMLESS = [
    pytest.param("1 + 1 = 2", '(print_string "trying ARITH_TAC\\n"; ARITH_TAC)', id="print_string"),
    pytest.param("1 + 1 = 2", '(print_endline "x"; flush stdout; ARITH_TAC)', id="print_endline-flush"),
    pytest.param("!n. n + 0 = n", 'INDUCT_TAC THEN (Printf.printf "case %d\\n" 1; ASM_REWRITE_TAC[ADD_CLAUSES])',
                 id="Printf.printf"),
    pytest.param("1 + 1 = 2", '(Format.printf "progress@."; ARITH_TAC)', id="Format.printf"),
    pytest.param("1 + 1 = 2", 'fun g -> try ARITH_TAC g with Failure m -> failwith (Printf.sprintf "failed: %s" m)',
                 id="Printf.sprintf"),
    pytest.param("1 + 1 = 2", "fun g -> try ARITH_TAC g with e -> failwith (Printexc.to_string e)",
                 id="Printexc.to_string"),
    pytest.param("1 + 1 = 2", "let memo = Hashtbl.create 7 in fun g -> (match Hashtbl.find_opt memo 0 with "
                 "Some t -> t | None -> let t = ARITH_TAC in Hashtbl.replace memo 0 t; t) g", id="Hashtbl"),
    pytest.param("1 + 1 = 2", "let count = ref 0 in fun g -> count := !count + 1; incr count; ARITH_TAC g",
                 id="ref-assign"),
    pytest.param("1 + 1 = 2", '(ignore (Array.length [| 1 |] + Int.abs (-1) + Buffer.length (Buffer.create 1)); '
                 'ignore (Option.value ~default:0 None); ARITH_TAC)', id="Array-Int-Buffer-Option"),
    pytest.param("1 + 1 = 2", "let t0 = Sys.time () in fun g -> let r = ARITH_TAC g in ignore (Sys.time () -. t0); r",
                 id="Sys.time"),
    pytest.param("1 + 1 = 2", "time ARITH_TAC", id="time"),
    pytest.param("1 + 1 = 2", '(ignore (search [name "ADD_SYM"]); ARITH_TAC)', id="search"),
    pytest.param("!n. n + 0 = n", "(extend_basic_rewrites [ADD_CLAUSES]; INDUCT_TAC THEN ASM_REWRITE_TAC[])",
                 id="extend_basic_rewrites"),
]


@pytest.mark.parametrize(("goal", "proof"), HARMLESS)
def test_harmless_stdlib_and_hol_utilities_are_run(hol, goal, proof):
    check(hol, T(goal), proof, Verdict.OK)


#: Next to each harmless rule, the cheat it must not open, with the reason's words.
CLASS_ONE = [
    pytest.param('(Printf.printf "OK\\n"; CHEAT_TAC)', "proves any goal", id="printing-then-CHEAT_TAC"),
    pytest.param("let memo = Hashtbl.create 1 in Hashtbl.add memo 0 CHEAT_TAC; Hashtbl.find memo 0",
                 "proves any goal", id="CHEAT_TAC-in-a-Hashtbl"),
    pytest.param("(the_axioms := []; ALL_TAC)", "record of axioms", id="assign-the-kernel-record"),
    pytest.param('(ignore (Sys.command "true"); ALL_TAC)', "runs commands", id="Sys.command-next-to-Sys.time"),
    pytest.param("(Printexc.set_uncaught_exception_handler (fun _ _ -> ()); ALL_TAC)", "when the worker dies",
                 id="Printexc-handler-next-to-to_string"),
    pytest.param("(close_out stdout; ACCEPT_TAC (ASSUME `1 + 1 = 3`))", "closes an output channel",
                 id="close_out-stdout"),
    pytest.param("(let x : thm = Array.unsafe_get [| |] 0 in ACCEPT_TAC x)", "bounds check", id="Array.unsafe_get"),
    pytest.param("(ignore (Gc.finalise (fun _ -> ()) [1]); ALL_TAC)", "finalisers", id="Gc.finalise"),
    pytest.param('(fun g -> raise (Pg_done {verdict = "OK"; category = "none"; reasons = []; detail = ""; '
                 'goals = ""}))', "verdict machinery", id="Pg_done"),
    pytest.param("(let open Obj in ACCEPT_TAC (magic TRUTH))", "below the type system", id="let-open-Obj"),
    pytest.param('#use "x.ml";; ALL_TAC', "directive", id="directive"),
    pytest.param("ALL_TAC;; let prove (t, tac) = TRUTH;;", "redefines prove", id="redefine-prove"),
    pytest.param("(ignore (new_definition `pgzz = 1`); ALL_TAC)", "through new_basic_definition", id="taint-reason"),
]


@pytest.mark.parametrize(("proof", "why"), CLASS_ONE)
def test_class_one_is_cheating_with_a_reason_that_says_what_it_could_do(hol, proof, why):
    result = check(hol, T("1 + 1 = 3"), proof, Verdict.CHEATING)
    assert why in " ".join(result.reasons), result.reasons


#: Not on the allow-list, or refused without a reason to call it a cheat: ERROR, and the feedback says what is
#: allowed. Each was CHEATING before issue 26; each is a correct proof otherwise.
UNLISTED = [
    pytest.param('(ignore (Filename.concat "a" "b"); ARITH_TAC)', id="Filename.concat"),
    pytest.param("(ignore (Random.int 3); ARITH_TAC)", id="Random"),
    pytest.param('(Printf.fprintf stdout "x"; ARITH_TAC)', id="Printf.fprintf"),
    pytest.param('(output_string stdout "x"; ARITH_TAC)', id="output_string"),
    pytest.param("(Format.set_formatter_out_channel stdout; ARITH_TAC)", id="set_formatter_out_channel"),
    pytest.param('(parse_as_infix ("++", (16, "right")); ARITH_TAC)', id="parse_as_infix"),
    # a type abbreviation is parser state, not a kernel type (was CHEATING among the theory extensions)
    pytest.param('(ignore (new_type_abbrev ("pgab", `:num`)); ARITH_TAC)', id="new_type_abbrev"),
    pytest.param("(ignore (object method m = 1 end); ARITH_TAC)", id="object"),
    pytest.param("(let open List in ignore (length [1]); ARITH_TAC)", id="let-open-List"),
    pytest.param("(ARITH_TAC [@ocaml.inline])", id="attribute"),
    pytest.param("ARITH_TAC;; ARITH_TAC", id="two-phrases"),
]


@pytest.mark.parametrize("proof", UNLISTED)
def test_unlisted_is_error_that_says_what_is_allowed(hol, proof):
    result = check(hol, T("1 + 1 = 2"), proof, Verdict.ERROR)
    assert any("allowed: HOL Light's tactics" in r for r in result.reasons), result.reasons


#: A context's functions are judged by what their taint reaches: a class-1 seed makes them CHEATING, a class-3 one
#: (a channel writer) ERROR. Both were CHEATING before issue 26.
SEEDS_CONTEXT = ('let my_print oc = Printf.fprintf oc "x";;\n'
                 "let my_reader f = let ic = open_in f in close_in ic;;\n")


@pytest.mark.parametrize(("proof", "verdict", "why"), [
    ('(ignore (my_reader "/etc/hostname"); ARITH_TAC)', Verdict.CHEATING, "opens or reads files or input"),
    ("(ignore my_print; ARITH_TAC)", Verdict.ERROR, "(through Printf.fprintf): writes to a channel"),
])
def test_a_tainted_name_takes_the_class_of_what_it_reaches(hol, proof, verdict, why):
    result = check(hol, T("1 + 1 = 2", SEEDS_CONTEXT), proof, verdict)
    assert why in " ".join(result.reasons), result.reasons


# ---------------------------------------------------------------------------------------------
# fairness: the goalstack style and comments


@pytest.mark.parametrize(("goal", "proof", "verdict"), [
    ("1 + 1 = 2", "ARITH_TAC;; (* done *)", Verdict.OK),
    ("1 + 1 = 2", "(* by arithmetic *)\nARITH_TAC;;\n(* QED *)\n", Verdict.OK),
    ("1 + 1 = 2", "g `1 + 1 = 2`;;\ne(ARITH_TAC);;", Verdict.OK),
    ("1 + 1 = 2", "e(ARITH_TAC);;", Verdict.OK),
    # e works on the first goal only: CONV_TAC NUM_REDUCE_CONV fails on the second, so THEN would not do
    ("2 + 2 = 4 /\\ (p ==> p)",
     "g `2 + 2 = 4 /\\ (p ==> p)`;;\ne(CONJ_TAC);;\ne(CONV_TAC NUM_REDUCE_CONV);;\ne(DISCH_THEN ACCEPT_TAC);;",
     Verdict.OK),
    ("2 + 2 = 4 /\\ (p ==> p)",
     "g `2 + 2 = 4 /\\ (p ==> p)`;; e(CONJ_TAC);; r 1;; e(DISCH_THEN ACCEPT_TAC);; e(CONV_TAC NUM_REDUCE_CONV);;",
     Verdict.OK),
    ("2 + 2 = 4 /\\ (p ==> p)",
     "g `2 + 2 = 4 /\\ (p ==> p)`;; e(CONJ_TAC);; e(ALL_TAC);; b();; e(CONV_TAC NUM_REDUCE_CONV);;\n"
     "e (DISCH_THEN ACCEPT_TAC);;\nlet th = top_thm();;", Verdict.OK),
    ("!n. n + 0 = n", "g `!n. n + 0 = n`;;\ne (INDUCT_TAC);;\ne (REWRITE_TAC[ADD_CLAUSES]);;", Verdict.FAIL),
    ("!n. n + 0 = n", "let ADD_0_LEMMA = prove(`!n. n + 0 = n`, REWRITE_TAC[ADD_CLAUSES]);;", Verdict.OK),
    ("!n. n + 0 = n", "prove(`!n. n + 0 = n`,\n  INDUCT_TAC THEN ASM_REWRITE_TAC[ADD_CLAUSES])", Verdict.OK),
    # slips that are not goalstack commands: ERROR with the reason, never CHEATING
    ("1 + 1 = 2", "g `1 + 1 = 2`;;\ne(ARITH_TAC);;\nprint_string \"done\";;", Verdict.ERROR),
    ("1 + 1 = 2", "g `1 + 1 = 2`;;", Verdict.ERROR),
    # cheats stay cheats in any style
    ("1 + 1 = 3", "g `1 + 1 = 3`;;\ne(CHEAT_TAC);;", Verdict.CHEATING),
    ("1 + 1 = 3", "g `1 + 1 = 3`;; e(ALL_TAC);; let prove (t, tac) = TRUTH;;", Verdict.CHEATING),
    ("1 + 1 = 3", "e(ACCEPT_TAC (mk_thm([], `1 + 1 = 3`)));;", Verdict.CHEATING),
    ("1 + 1 = 3", "ARITH_TAC;; (* *) ARITH_TAC", Verdict.ERROR),  # two phrases are never run: nothing to cheat
    ("1 + 1 = 3", "let X = prove(`1 + 1 = 3`, CHEAT_TAC);;", Verdict.CHEATING),
])
def test_goalstack_scripts_and_comments(hol, goal, proof, verdict):
    result = check(hol, T(goal), proof, verdict)
    if verdict is Verdict.ERROR:
        assert "goalstack" in " ".join(result.reasons) or "exactly one tactic expression" in result.reasons[0], result
    if verdict is Verdict.FAIL:
        assert len(result.remaining_goals) == 1 and "SUC" in result.remaining_goals[0].conclusion, result


# ---------------------------------------------------------------------------------------------
# the server: big verdicts, goals no term can forge


def test_a_goal_named_with_separator_bytes_is_one_goal(hol):
    """A variable may be called anything (mk_var): the goals it appears in are still counted right."""
    name = "p\\029q\\030r\\031s\\nt"
    result = check(hol, T("1 + 1 = 2"), f'SUBGOAL_THEN (mk_var("{name}", bool_ty)) ASSUME_TAC', Verdict.FAIL)
    assert len(result.remaining_goals) == 2, result.remaining_goals
    first, second = result.remaining_goals
    assert first.conclusion == "p\x1dq\x1er\x1fs\nt" and first.hypotheses == ()
    assert second.conclusion == "1 + 1 = 2" and second.hypotheses == ("p\x1dq\x1er\x1fs\nt",)


def test_a_verdict_over_a_mebibyte_stays_a_fail_with_its_goals(hol):
    retries = hol.stats["retries"]
    huge = check(hol, T("1 + 1 = 2"), "SUBGOAL_THEN (mk_var(String.make 2000000 (Char.chr 120), bool_ty)) (K ALL_TAC)",
                 Verdict.FAIL)
    assert len(huge.remaining_goals) == 2 and huge.remaining_goals[0].conclusion.startswith("xxxx")
    assert "more bytes not shown" in huge.remaining_goals[0].conclusion
    assert huge.remaining_goals[1].conclusion == "1 + 1 = 2"
    message = check(hol, T("1 + 1 = 2"), "failwith (String.make 2000000 (Char.chr 120))", Verdict.FAIL)
    assert "more bytes not shown" in message.reasons[0]
    many = check(hol, T("1 + 1 = 2"),
                 "SUBGOAL_THEN (list_mk_conj (map (fun i -> mk_var (\"v\" ^ string_of_int i ^ String.make 1000 "
                 "(Char.chr 120), bool_ty)) (1--600))) (K ALL_TAC) THENL [REPEAT CONJ_TAC; ALL_TAC]", Verdict.FAIL)
    assert len(many.remaining_goals) == 601 and many.reasons == ("601 goal(s) remain",)
    assert many.remaining_goals[0].conclusion.startswith("v1x")
    assert "not shown" in many.remaining_goals[-1].conclusion
    assert hol.stats["retries"] == retries  # none of them was taken for a dead worker


def test_tactic_mode_takes_goalstack_steps_and_counts_goals_no_term_can_forge(hol):
    """Tactic-v0's states come from the same goals: a step written as e(...);; is the tactic, and a goal whose
    variable is named with the old separator bytes is one goal, not three."""
    with hol.open(T("2 + 2 = 4 /\\ (p ==> p)")) as session:
        split = session.run("e(CONJ_TAC);;")
        assert split.ok and len(split.state.goals) == 2, split
        forged = session.run('SUBGOAL_THEN (mk_var("a\\029b\\030c", bool_ty)) ASSUME_TAC', split.state.state_id)
        assert forged.ok and len(forged.state.goals) == 3, forged
        assert forged.state.goals[0].conclusion == "a\x1db\x1ec"
        assert forged.state.goals[1].hypotheses == ("a\x1db\x1ec",)


def test_a_server_that_dies_at_start_up_says_so_with_its_output():
    """No HOL Light load: the prelude runs first and exits. The error says it died, and shows what it printed."""
    from proofgym.envs.errors import VerifierCrashed
    from proofgym.envs.verifiers.hol_light import BaseContext, HolLightVerifier

    base = BaseContext(prelude='prerr_endline "pg-dying-now";; exit 3;;', startup_timeout_s=1800)
    with HolLightVerifier(progress=False, bases=(base,)) as verifier, pytest.raises(VerifierCrashed) as crash:
        verifier.server("plain")
    message = str(crash.value)
    assert "died during start-up" in message and "exit status 3" in message and "pg-dying-now" in message, message
    assert "did not become ready" not in message
