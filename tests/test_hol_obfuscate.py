"""s2n-bignum-bench's query obfuscation (proofgym.envs.tasks.hol_obfuscate).

The decoding and the bench's seed are plain Python; the rest runs on real HOL Light, on the run-wide warm
server (the session fixture ``hol`` in conftest.py): tricky queries (polymorphic constants, an invented type
variable, binders, numerals, let, set-builder, a bound variable named like a constant) are reprinted with
every atom's type, read back alpha-equivalent, and still proved by their reference proof; a reprint that
does not read back is kept unobfuscated and counted.
"""

from __future__ import annotations

import pytest

from proofgym.envs.tasks.hol_obfuscate import bench_seed, obfuscate_tasks, probe_task, read_probe
from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.hol_light import hol_light_installed


def T(ident: str, goal: str, proof: str, *, context: str = "", category: str = "generic") -> Task:
    return Task(id=ident, system="hol_light", context=context, statement=f"`{goal}`", reference_proof=proof,
                category=category, timeout_s=60.0)


def test_bench_seed_is_sha1_mod_100000():
    # sha1("arm.bignum_add.BIGNUM_ADD_CORRECT") = 0x...; the bench takes int(hexdigest, 16) % 100000
    import hashlib

    pid = "arm.bignum_add.BIGNUM_ADD_CORRECT"
    assert bench_seed(pid) == int(hashlib.sha1(pid.encode()).hexdigest(), 16) % 100000  # noqa: S324
    assert bench_seed(pid) != bench_seed(pid + ".0")


def test_probe_task_runs_the_obfuscator_after_the_context():
    task = T("x.1", "!n. n + 0 = n", "ARITH_TAC", context="let A = 1;;\n")
    probe = probe_task(task, 2)
    assert probe.context.startswith("let A = 1;;\n") and "let pg_obfuscate" in probe.context
    assert probe.context.rstrip().endswith(f"pg_obf_result := pg_obfuscate 2 {bench_seed('x.1')} (`!n. n + 0 = n`);;")
    assert probe.statement == "`pg_obfuscation_output:bool`"
    with pytest.raises(ValueError, match="tier"):
        probe_task(task, 3)


def _framed(payload: str) -> str:
    return f"{len(payload)}\n{payload}"


@pytest.mark.parametrize(("verdict", "goals", "status", "text"), [
    (Verdict.FAIL, [_framed("OBFUSCATED\n(x:num) = x")], "OBFUSCATED", "`(x:num) = x`"),
    (Verdict.FAIL, [_framed("ROUNDTRIP\n(x:num) = x")], "ROUNDTRIP", "(x:num) = x"),
    (Verdict.FAIL, [_framed("NOPARSE\nbad\n)(")], "NOPARSE", ")("),
    (Verdict.FAIL, ["99999\nOBFUSCATED\n(x:num) ... [5 more bytes not shown]"], "TOO_LONG", ""),
    (Verdict.ERROR, [], "PROBE_FAILED", ""),
    (Verdict.FAIL, ["no length"], "PROBE_FAILED", ""),
    (Verdict.FAIL, [_framed("WHAT\nx")], "PROBE_FAILED", ""),
])
def test_read_probe(verdict, goals, status, text):
    got = read_probe(verdict, goals)
    assert (got.status, got.text) == (status, text)


# --------------------------------------------------------------------------------------------
# real HOL Light

needs_hol = pytest.mark.skipif(not hol_light_installed(), reason="HOL Light is not installed: run `make setup` "
                               "(apt-get install hol-light libnum-ocaml-dev)")

TRICKY = [
    T("poly", "!l:(A)list. LENGTH (REVERSE l) = LENGTH l", "REWRITE_TAC[LENGTH_REVERSE]"),
    T("invented", "x = x", "REFL_TAC"),  # x's type is invented (?N): it becomes bench_arbty0
    # references that name no bound variable: tier 2 renames them all
    T("binders", "!m. ?n. m < n /\\ (\\k. k + 1) m = SUC m",
      "X_GEN_TAC `m:num` THEN EXISTS_TAC `SUC m` THEN BETA_TAC THEN ARITH_TAC"),
    T("numerals", "&3 + &4 = (&7:real) /\\ 2 + 2 = 4", "CONJ_TAC THENL [REAL_ARITH_TAC; ARITH_TAC]"),
    T("intneg", "--(&1):int < &0", "INT_ARITH_TAC"),
    T("let", "!a. (let b = a + 1 in b * b) = (a + 1) * (a + 1)",
      "REWRITE_TAC[LET_DEF; LET_END_DEF] THEN BETA_TAC THEN REWRITE_TAC[]"),
    T("setbuilder", "!s:num->bool. {x | x IN s} = s /\\ {} UNION s = s /\\ UNIV INTER s = s", "SET_TAC[]"),
    T("cond_pair", "!p:num#num. (if FST p = 0 then SND p else SND p) = SND p", "MESON_TAC[]"),
    T("constname", "!pg_c. pg_c + 0 = pg_c", "ARITH_TAC",  # a bound variable named like a constant
      context="let PG_C_DEF = new_definition `pg_c = 7`;;\n"),
]


@pytest.mark.prover
@needs_hol
@pytest.mark.parametrize("tier", [1, 2])
def test_tricky_queries_are_reprinted_with_types_and_read_back(hol, tier):
    obfuscated, report = obfuscate_tasks(TRICKY, hol, tier=tier)
    by_id = {t.id: t.statement for t in obfuscated}
    assert report.obfuscated == len(TRICKY) and not report.kept, (report.render(), by_id)
    assert f"{len(TRICKY)} of {len(TRICKY)} queries obfuscated" in report.render()
    for task in obfuscated:
        text = task.statement
        assert task.metadata["query_unobfuscated"] != text and task.metadata["obfuscation"] == f"tier {tier}"
        # one quotation the verifier parses, alpha-equivalent to the query: the reference still proves it
        assert text.startswith("`") and text.endswith("`") and "`" not in text[1:-1]
        result = hol.check(task, task.reference_proof)
        assert result.verdict is Verdict.OK, (task.id, text, result.reasons)
    assert "(LENGTH:(A)list->num)" in by_id["poly"] and "(REVERSE:(A)list->(A)list)" in by_id["poly"]
    assert "(x:bench_arbty0) = (x:bench_arbty0)" in by_id["invented"]
    assert "(SUC:num->num)" in by_id["binders"]
    assert "{" in by_id["setbuilder"] and "(UNIV:" not in by_id["setbuilder"]
    bound = f"v{bench_seed('constname')}" if tier == 2 else "v0"
    assert by_id["constname"].startswith(f"`!({bound}:num).") and "pg_c" not in by_id["constname"]
    if tier == 2:  # every bound variable is v<seed>, v<seed+1> ...
        seed = bench_seed("binders")
        assert f"!(v{seed}:num)." in by_id["binders"] and not {"(m:num)", "(k:num)"} & set(by_id["binders"].split())
    else:
        assert "!(m:num)." in by_id["binders"] and "(k:num)" in by_id["binders"]


@pytest.mark.prover
@needs_hol
def test_a_reprint_that_does_not_read_back_is_kept_and_counted(hol):
    """A context's own printer can make the reprint unreadable (NOPARSE) or read back as another term
    (ROUNDTRIP): the query stays as it was, and the report counts it."""
    garble = ('install_user_printer("pg_garble", fun fmt tm -> if is_comb tm && is_const(rator tm) && '
              'fst(dest_const(rator tm)) = "SUC" then pp_print_string fmt ")(" else failwith "");;\n')
    swap = ('install_user_printer("pg_swap", fun fmt tm -> if is_comb tm && is_const(rator tm) && '
            'fst(dest_const(rator tm)) = "SUC" then pp_print_string fmt "0" else failwith "");;\n')
    tasks = [T("garbled", "!n. SUC n > 0", "ARITH_TAC", context=garble),
             T("swapped", "!n. SUC n > 0", "ARITH_TAC", context=swap),
             T("fine", "!n. n + 0 = n", "ARITH_TAC")]
    out, report = obfuscate_tasks(tasks, hol, tier=1)
    assert report.obfuscated == 1 and report.kept == {"NOPARSE": 1, "ROUNDTRIP": 1}, report.render()
    assert report.kept_ids == {"NOPARSE": ["garbled"], "ROUNDTRIP": ["swapped"]}
    assert [t.statement for t in out[:2]] == [tasks[0].statement, tasks[1].statement]
    assert out[0].metadata["obfuscation"].startswith("kept: NOPARSE")
    assert "kept unobfuscated     1: ROUNDTRIP" in report.render()
