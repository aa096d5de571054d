"""The natural-language-to-Dafny suite (``dafny-nl``): tasks written for proofgym, verified on Dafny 2.3.

Each task is a classic verified-programming exercise (search, sorting, sums with loop invariants,
sequences, recursion with lemmas, small classes). ``context`` is code the program must keep (spec
functions), ``statement`` the headers to implement, ``solution`` the implementation; the task's
``reference_proof`` is ``context + solution``, the whole program. Difficulty follows SkillForge:
*simple* (straight-line code, no loop), *medium* (one loop or a recursion with an automatic
proof), *hard* (nested loops, permutations, or helper lemmas the prover cannot find alone).

:mod:`proofgym.envs.tasks.dafny_nl` builds ``data/dafny-nl.jsonl`` from this list and validates it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DafnyTaskSource:
    """One authored task before it becomes a :class:`~proofgym.envs.types.Task`."""

    name: str
    category: str  # simple | medium | hard
    description: str
    statement: str
    solution: str
    context: str = ""


T = DafnyTaskSource

# ---------------------------------------------------------------------------------------------
# shared spec functions (contexts)

SUM_BACK = """function Sum(s: seq<int>): int
{
  if |s| == 0 then 0 else Sum(s[..|s| - 1]) + s[|s| - 1]
}
"""

SUM_FRONT = """function SumF(s: seq<int>): int
{
  if |s| == 0 then 0 else s[0] + SumF(s[1..])
}
"""

FIB = """function Fib(n: nat): nat
{
  if n < 2 then n else Fib(n - 1) + Fib(n - 2)
}
"""

FACT = """function Fact(n: nat): nat
{
  if n == 0 then 1 else n * Fact(n - 1)
}
"""

POW = """function Pow(b: int, e: nat): int
{
  if e == 0 then 1 else b * Pow(b, e - 1)
}
"""

SORTED = """predicate Sorted(s: seq<int>)
{
  forall i, j :: 0 <= i < j < |s| ==> s[i] <= s[j]
}
"""

COUNT = """function Count(s: seq<int>, x: int): nat
{
  if |s| == 0 then 0 else Count(s[..|s| - 1], x) + (if s[|s| - 1] == x then 1 else 0)
}
"""

REV = """function Rev(s: seq<int>): seq<int>
{
  if |s| == 0 then [] else Rev(s[1..]) + [s[0]]
}
"""

GCD = """function Gcd(a: nat, b: nat): nat
  requires a > 0 || b > 0
  decreases a + b
{
  if a == 0 then b else if b == 0 then a else if a >= b then Gcd(a - b, b) else Gcd(a, b - a)
}
"""

SUM_TO = """function SumTo(n: nat): nat
{
  if n == 0 then 0 else SumTo(n - 1) + n
}
"""

POW2 = """function Pow2(n: nat): nat
{
  if n == 0 then 1 else 2 * Pow2(n - 1)
}
"""

SUM_ODDS = """function SumOdds(n: nat): nat
{
  if n == 0 then 0 else SumOdds(n - 1) + 2 * n - 1
}
"""

MAXSEQ = """function SeqMax(s: seq<int>): int
  requires |s| > 0
{
  if |s| == 1 then s[0] else if s[|s| - 1] > SeqMax(s[..|s| - 1]) then s[|s| - 1] else SeqMax(s[..|s| - 1])
}
"""

TASKS: list[DafnyTaskSource] = [
    # =========================================================================================
    # simple
    T("abs", "simple", "Return the absolute value of an integer x.",
      """method Abs(x: int) returns (y: int)
  ensures y >= 0
  ensures y == x || y == -x
""",
      """method Abs(x: int) returns (y: int)
  ensures y >= 0
  ensures y == x || y == -x
{
  if x < 0 {
    y := -x;
  } else {
    y := x;
  }
}
"""),
    T("max2", "simple", "Return the larger of two integers a and b.",
      """method Max(a: int, b: int) returns (m: int)
  ensures m >= a && m >= b
  ensures m == a || m == b
""",
      """method Max(a: int, b: int) returns (m: int)
  ensures m >= a && m >= b
  ensures m == a || m == b
{
  if a >= b {
    m := a;
  } else {
    m := b;
  }
}
"""),
    T("min3", "simple", "Return the smallest of three integers.",
      """method Min3(a: int, b: int, c: int) returns (m: int)
  ensures m <= a && m <= b && m <= c
  ensures m == a || m == b || m == c
""",
      """method Min3(a: int, b: int, c: int) returns (m: int)
  ensures m <= a && m <= b && m <= c
  ensures m == a || m == b || m == c
{
  m := a;
  if b < m {
    m := b;
  }
  if c < m {
    m := c;
  }
}
"""),
    T("sign", "simple", "Return the sign of x: 1 if it is positive, -1 if it is negative, 0 if it is zero.",
      """method Sign(x: int) returns (s: int)
  ensures x > 0 ==> s == 1
  ensures x < 0 ==> s == -1
  ensures x == 0 ==> s == 0
""",
      """method Sign(x: int) returns (s: int)
  ensures x > 0 ==> s == 1
  ensures x < 0 ==> s == -1
  ensures x == 0 ==> s == 0
{
  if x > 0 {
    s := 1;
  } else if x < 0 {
    s := -1;
  } else {
    s := 0;
  }
}
"""),
    T("swap_pair", "simple", "Given two integers, return them in swapped order.",
      """method Swap(x: int, y: int) returns (a: int, b: int)
  ensures a == y && b == x
""",
      """method Swap(x: int, y: int) returns (a: int, b: int)
  ensures a == y && b == x
{
  a, b := y, x;
}
"""),
    T("is_even", "simple", "Decide whether an integer n is even.",
      """method IsEven(n: int) returns (b: bool)
  ensures b <==> n % 2 == 0
""",
      """method IsEven(n: int) returns (b: bool)
  ensures b <==> n % 2 == 0
{
  b := n % 2 == 0;
}
"""),
    T("clamp", "simple", "Clamp x into the interval [lo, hi]: values below lo become lo, values above hi become hi.",
      """method Clamp(x: int, lo: int, hi: int) returns (r: int)
  requires lo <= hi
  ensures lo <= r <= hi
  ensures lo <= x <= hi ==> r == x
  ensures x < lo ==> r == lo
  ensures x > hi ==> r == hi
""",
      """method Clamp(x: int, lo: int, hi: int) returns (r: int)
  requires lo <= hi
  ensures lo <= r <= hi
  ensures lo <= x <= hi ==> r == x
  ensures x < lo ==> r == lo
  ensures x > hi ==> r == hi
{
  if x < lo {
    r := lo;
  } else if x > hi {
    r := hi;
  } else {
    r := x;
  }
}
"""),
    T("first_elem", "simple", "Return the first element of a non-empty array.",
      """method First(a: array<int>) returns (x: int)
  requires a.Length > 0
  ensures x == a[0]
""",
      """method First(a: array<int>) returns (x: int)
  requires a.Length > 0
  ensures x == a[0]
{
  x := a[0];
}
"""),
    T("swap_in_array", "simple", "Swap the elements at positions i and j of an array, leaving the others unchanged.",
      """method SwapElems(a: array<int>, i: int, j: int)
  requires 0 <= i < a.Length && 0 <= j < a.Length
  modifies a
  ensures a[i] == old(a[j]) && a[j] == old(a[i])
  ensures forall k :: 0 <= k < a.Length && k != i && k != j ==> a[k] == old(a[k])
""",
      """method SwapElems(a: array<int>, i: int, j: int)
  requires 0 <= i < a.Length && 0 <= j < a.Length
  modifies a
  ensures a[i] == old(a[j]) && a[j] == old(a[i])
  ensures forall k :: 0 <= k < a.Length && k != i && k != j ==> a[k] == old(a[k])
{
  var t := a[i];
  a[i] := a[j];
  a[j] := t;
}
"""),
    T("sum_formula", "simple", "Compute 0 + 1 + ... + n with Gauss's closed formula.",
      """method GaussSum(n: nat) returns (s: nat)
  ensures s == n * (n + 1) / 2
""",
      """method GaussSum(n: nat) returns (s: nat)
  ensures s == n * (n + 1) / 2
{
  s := n * (n + 1) / 2;
}
"""),
    T("div_mod", "simple", "Divide a natural number a by a positive b, returning quotient and remainder.",
      """method DivMod(a: nat, b: int) returns (q: int, r: int)
  requires b > 0
  ensures a == q * b + r
  ensures 0 <= r < b
""",
      """method DivMod(a: nat, b: int) returns (q: int, r: int)
  requires b > 0
  ensures a == q * b + r
  ensures 0 <= r < b
{
  q := a / b;
  r := a % b;
}
"""),
    T("max_function", "simple", "Define a compiled function giving the maximum of two integers.",
      """function method MaxF(a: int, b: int): int
  ensures MaxF(a, b) >= a && MaxF(a, b) >= b
  ensures MaxF(a, b) == a || MaxF(a, b) == b
""",
      """function method MaxF(a: int, b: int): int
  ensures MaxF(a, b) >= a && MaxF(a, b) >= b
  ensures MaxF(a, b) == a || MaxF(a, b) == b
{
  if a >= b then a else b
}
"""),
    T("abs_function", "simple", "Define a function that returns the absolute value of x as a natural number.",
      """function method AbsF(x: int): nat
  ensures AbsF(x) == x || AbsF(x) == -x
""",
      """function method AbsF(x: int): nat
  ensures AbsF(x) == x || AbsF(x) == -x
{
  if x < 0 then -x else x
}
"""),
    T("leap_year", "simple",
      "Decide whether a year is a leap year: divisible by 4 but not by 100, or divisible by 400.",
      """method IsLeap(y: int) returns (b: bool)
  ensures b <==> (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
""",
      """method IsLeap(y: int) returns (b: bool)
  ensures b <==> (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
{
  if y % 400 == 0 {
    b := true;
  } else if y % 100 == 0 {
    b := false;
  } else {
    b := y % 4 == 0;
  }
}
"""),
    T("seq_last", "simple", "Return the last element of a non-empty sequence.",
      """method Last(s: seq<int>) returns (x: int)
  requires |s| > 0
  ensures x == s[|s| - 1]
""",
      """method Last(s: seq<int>) returns (x: int)
  requires |s| > 0
  ensures x == s[|s| - 1]
{
  x := s[|s| - 1];
}
"""),
    T("new_array", "simple", "Allocate a fresh integer array of length n.",
      """method MakeArray(n: nat) returns (a: array<int>)
  ensures fresh(a)
  ensures a.Length == n
""",
      """method MakeArray(n: nat) returns (a: array<int>)
  ensures fresh(a)
  ensures a.Length == n
{
  a := new int[n];
}
"""),
    T("set_insert", "simple", "Add an element x to a set s and return the new set.",
      """method Insert(s: set<int>, x: int) returns (t: set<int>)
  ensures t == s + {x}
  ensures x in t
""",
      """method Insert(s: set<int>, x: int) returns (t: set<int>)
  ensures t == s + {x}
  ensures x in t
{
  t := s + {x};
}
"""),
    T("square_nonneg", "simple", "Prove that the square of any integer is non-negative.",
      """lemma SquareNonNeg(x: int)
  ensures x * x >= 0
""",
      """lemma SquareNonNeg(x: int)
  ensures x * x >= 0
{
  if x < 0 {
    assert x * x == (-x) * (-x);
  }
}
"""),
    T("is_digit", "simple", "Define a predicate that holds exactly for the characters '0' to '9'.",
      """predicate method IsDigit(c: char)
  ensures IsDigit(c) <==> '0' <= c <= '9'
""",
      """predicate method IsDigit(c: char)
  ensures IsDigit(c) <==> '0' <= c <= '9'
{
  '0' <= c <= '9'
}
"""),
    T("counter_class", "simple",
      "A counter object: the constructor starts it at zero and Inc adds one to its count.",
      """class Counter {
  var count: nat
  constructor ()
    ensures count == 0
  method Inc()
    modifies this
    ensures count == old(count) + 1
}
""",
      """class Counter {
  var count: nat
  constructor ()
    ensures count == 0
  {
    count := 0;
  }
  method Inc()
    modifies this
    ensures count == old(count) + 1
  {
    count := count + 1;
  }
}
"""),
    T("fib_base", "simple", "Prove that the Fibonacci numbers start 0, 1, 1, 2.",
      """lemma FibBase()
  ensures Fib(0) == 0 && Fib(1) == 1 && Fib(2) == 1 && Fib(3) == 2
""",
      """lemma FibBase()
  ensures Fib(0) == 0 && Fib(1) == 1 && Fib(2) == 1 && Fib(3) == 2
{
}
""", FIB),
    # =========================================================================================
    # medium
    T("array_sum", "medium", "Return the sum of the elements of an integer array.",
      """method ArraySum(a: array<int>) returns (s: int)
  ensures s == Sum(a[..])
""",
      """method ArraySum(a: array<int>) returns (s: int)
  ensures s == Sum(a[..])
{
  s := 0;
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant s == Sum(a[..i])
  {
    assert a[..i + 1][..i] == a[..i];
    s := s + a[i];
    i := i + 1;
  }
  assert a[..a.Length] == a[..];
}
""", SUM_BACK),
    T("array_max", "medium", "Return the largest element of a non-empty integer array.",
      """method MaxArray(a: array<int>) returns (m: int)
  requires a.Length > 0
  ensures forall i :: 0 <= i < a.Length ==> a[i] <= m
  ensures exists i :: 0 <= i < a.Length && a[i] == m
""",
      """method MaxArray(a: array<int>) returns (m: int)
  requires a.Length > 0
  ensures forall i :: 0 <= i < a.Length ==> a[i] <= m
  ensures exists i :: 0 <= i < a.Length && a[i] == m
{
  m := a[0];
  var i := 1;
  while i < a.Length
    invariant 1 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> a[k] <= m
    invariant exists k :: 0 <= k < i && a[k] == m
  {
    if a[i] > m {
      m := a[i];
    }
    i := i + 1;
  }
}
"""),
    T("linear_search", "medium",
      "Find the index of a key in an array, or return -1 when the key does not occur.",
      """method LinearSearch(a: array<int>, key: int) returns (r: int)
  ensures 0 <= r ==> r < a.Length && a[r] == key
  ensures r < 0 ==> r == -1 && forall i :: 0 <= i < a.Length ==> a[i] != key
""",
      """method LinearSearch(a: array<int>, key: int) returns (r: int)
  ensures 0 <= r ==> r < a.Length && a[r] == key
  ensures r < 0 ==> r == -1 && forall i :: 0 <= i < a.Length ==> a[i] != key
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> a[k] != key
  {
    if a[i] == key {
      return i;
    }
    i := i + 1;
  }
  r := -1;
}
"""),
    T("sum_loop", "medium", "Compute 0 + 1 + ... + n with a loop (no closed formula in the code).",
      """method SumLoop(n: nat) returns (s: nat)
  ensures s == n * (n + 1) / 2
""",
      """method SumLoop(n: nat) returns (s: nat)
  ensures s == n * (n + 1) / 2
{
  s := 0;
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant s == i * (i + 1) / 2
  {
    i := i + 1;
    s := s + i;
  }
}
"""),
    T("fib_iter", "medium", "Compute the n-th Fibonacci number iteratively.",
      """method ComputeFib(n: nat) returns (f: nat)
  ensures f == Fib(n)
""",
      """method ComputeFib(n: nat) returns (f: nat)
  ensures f == Fib(n)
{
  var a, b := 0, 1;
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant a == Fib(i) && b == Fib(i + 1)
  {
    a, b := b, a + b;
    i := i + 1;
  }
  f := a;
}
""", FIB),
    T("factorial_iter", "medium", "Compute n factorial with a loop.",
      """method ComputeFact(n: nat) returns (f: nat)
  ensures f == Fact(n)
""",
      """method ComputeFact(n: nat) returns (f: nat)
  ensures f == Fact(n)
{
  f := 1;
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant f == Fact(i)
  {
    i := i + 1;
    f := f * i;
  }
}
""", FACT),
    T("power_iter", "medium", "Compute b raised to the power e with a loop.",
      """method ComputePow(b: int, e: nat) returns (p: int)
  ensures p == Pow(b, e)
""",
      """method ComputePow(b: int, e: nat) returns (p: int)
  ensures p == Pow(b, e)
{
  p := 1;
  var i := 0;
  while i < e
    invariant 0 <= i <= e
    invariant p == Pow(b, i)
  {
    p := p * b;
    i := i + 1;
  }
}
""", POW),
    T("reverse_copy", "medium", "Return a new array holding the elements of a in reverse order.",
      """method ReverseCopy(a: array<int>) returns (b: array<int>)
  ensures fresh(b)
  ensures b.Length == a.Length
  ensures forall i :: 0 <= i < a.Length ==> b[i] == a[a.Length - 1 - i]
""",
      """method ReverseCopy(a: array<int>) returns (b: array<int>)
  ensures fresh(b)
  ensures b.Length == a.Length
  ensures forall i :: 0 <= i < a.Length ==> b[i] == a[a.Length - 1 - i]
{
  b := new int[a.Length];
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> b[k] == a[a.Length - 1 - k]
  {
    b[i] := a[a.Length - 1 - i];
    i := i + 1;
  }
}
"""),
    T("array_copy", "medium", "Return a fresh copy of an array.",
      """method CopyArray(a: array<int>) returns (b: array<int>)
  ensures fresh(b)
  ensures b[..] == a[..]
""",
      """method CopyArray(a: array<int>) returns (b: array<int>)
  ensures fresh(b)
  ensures b[..] == a[..]
{
  b := new int[a.Length];
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> b[k] == a[k]
  {
    b[i] := a[i];
    i := i + 1;
  }
}
"""),
    T("fill", "medium", "Set every element of an array to the value v.",
      """method Fill(a: array<int>, v: int)
  modifies a
  ensures forall i :: 0 <= i < a.Length ==> a[i] == v
""",
      """method Fill(a: array<int>, v: int)
  modifies a
  ensures forall i :: 0 <= i < a.Length ==> a[i] == v
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> a[k] == v
  {
    a[i] := v;
    i := i + 1;
  }
}
"""),
    T("all_positive", "medium", "Decide whether every element of an array is strictly positive.",
      """method AllPositive(a: array<int>) returns (b: bool)
  ensures b <==> forall i :: 0 <= i < a.Length ==> a[i] > 0
""",
      """method AllPositive(a: array<int>) returns (b: bool)
  ensures b <==> forall i :: 0 <= i < a.Length ==> a[i] > 0
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> a[k] > 0
  {
    if a[i] <= 0 {
      return false;
    }
    i := i + 1;
  }
  b := true;
}
"""),
    T("is_sorted", "medium", "Decide whether an array is sorted in non-decreasing order (adjacent pairs).",
      """method IsSortedArr(a: array<int>) returns (b: bool)
  ensures b <==> forall i :: 0 <= i < a.Length - 1 ==> a[i] <= a[i + 1]
""",
      """method IsSortedArr(a: array<int>) returns (b: bool)
  ensures b <==> forall i :: 0 <= i < a.Length - 1 ==> a[i] <= a[i + 1]
{
  var i := 0;
  while i < a.Length - 1
    invariant 0 <= i <= a.Length || a.Length == 0
    invariant forall k :: 0 <= k < i && k < a.Length - 1 ==> a[k] <= a[k + 1]
  {
    if a[i] > a[i + 1] {
      return false;
    }
    i := i + 1;
  }
  b := true;
}
"""),
    T("min_index", "medium", "Return the index of a smallest element of a non-empty array.",
      """method MinIndex(a: array<int>) returns (idx: int)
  requires a.Length > 0
  ensures 0 <= idx < a.Length
  ensures forall i :: 0 <= i < a.Length ==> a[idx] <= a[i]
""",
      """method MinIndex(a: array<int>) returns (idx: int)
  requires a.Length > 0
  ensures 0 <= idx < a.Length
  ensures forall i :: 0 <= i < a.Length ==> a[idx] <= a[i]
{
  idx := 0;
  var i := 1;
  while i < a.Length
    invariant 1 <= i <= a.Length
    invariant 0 <= idx < a.Length
    invariant forall k :: 0 <= k < i ==> a[idx] <= a[k]
  {
    if a[i] < a[idx] {
      idx := i;
    }
    i := i + 1;
  }
}
"""),
    T("gcd_iter", "medium", "Compute the greatest common divisor of two positive numbers by repeated subtraction.",
      """method ComputeGcd(a: nat, b: nat) returns (g: nat)
  requires a > 0 && b > 0
  ensures g == Gcd(a, b)
""",
      """method ComputeGcd(a: nat, b: nat) returns (g: nat)
  requires a > 0 && b > 0
  ensures g == Gcd(a, b)
{
  var x, y := a, b;
  while x != y
    invariant x > 0 && y > 0
    invariant Gcd(x, y) == Gcd(a, b)
    decreases x + y
  {
    if x > y {
      x := x - y;
    } else {
      y := y - x;
    }
  }
  g := x;
}
""", GCD),
    T("int_sqrt", "medium", "Compute the integer square root of n: the largest r with r * r <= n.",
      """method IntSqrt(n: nat) returns (r: nat)
  ensures r * r <= n < (r + 1) * (r + 1)
""",
      """method IntSqrt(n: nat) returns (r: nat)
  ensures r * r <= n < (r + 1) * (r + 1)
{
  r := 0;
  while (r + 1) * (r + 1) <= n
    invariant r * r <= n
  {
    r := r + 1;
  }
}
"""),
    T("increment_all", "medium", "Add one to every element of an array in place.",
      """method IncrementAll(a: array<int>)
  modifies a
  ensures forall i :: 0 <= i < a.Length ==> a[i] == old(a[i]) + 1
""",
      """method IncrementAll(a: array<int>)
  modifies a
  ensures forall i :: 0 <= i < a.Length ==> a[i] == old(a[i]) + 1
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> a[k] == old(a[k]) + 1
    invariant forall k :: i <= k < a.Length ==> a[k] == old(a[k])
  {
    a[i] := a[i] + 1;
    i := i + 1;
  }
}
"""),
    T("sum_to_lemma", "medium", "Prove that the recursive sum 0 + 1 + ... + n equals n * (n + 1) / 2.",
      """lemma SumToFormula(n: nat)
  ensures SumTo(n) == n * (n + 1) / 2
""",
      """lemma SumToFormula(n: nat)
  ensures SumTo(n) == n * (n + 1) / 2
{
  if n > 0 {
    SumToFormula(n - 1);
  }
}
""", SUM_TO),
    T("mult_by_add", "medium", "Multiply two natural numbers using only repeated addition.",
      """method Mult(a: nat, b: nat) returns (p: nat)
  ensures p == a * b
""",
      """method Mult(a: nat, b: nat) returns (p: nat)
  ensures p == a * b
{
  p := 0;
  var i := 0;
  while i < a
    invariant 0 <= i <= a
    invariant p == i * b
  {
    p := p + b;
    i := i + 1;
  }
}
"""),
    T("contains", "medium", "Decide whether the value x occurs in an array.",
      """method Contains(a: array<int>, x: int) returns (b: bool)
  ensures b <==> exists i :: 0 <= i < a.Length && a[i] == x
""",
      """method Contains(a: array<int>, x: int) returns (b: bool)
  ensures b <==> exists i :: 0 <= i < a.Length && a[i] == x
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> a[k] != x
  {
    if a[i] == x {
      return true;
    }
    i := i + 1;
  }
  return false;
}
"""),
    T("count_occ", "medium", "Count how many times x occurs in an array.",
      """method CountOcc(a: array<int>, x: int) returns (c: nat)
  ensures c == Count(a[..], x)
""",
      """method CountOcc(a: array<int>, x: int) returns (c: nat)
  ensures c == Count(a[..], x)
{
  c := 0;
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant c == Count(a[..i], x)
  {
    assert a[..i + 1][..i] == a[..i];
    if a[i] == x {
      c := c + 1;
    }
    i := i + 1;
  }
  assert a[..a.Length] == a[..];
}
""", COUNT),
    T("double_array", "medium", "Return a new array whose elements are twice those of a.",
      """method DoubleArray(a: array<int>) returns (b: array<int>)
  ensures fresh(b)
  ensures b.Length == a.Length
  ensures forall i :: 0 <= i < a.Length ==> b[i] == 2 * a[i]
""",
      """method DoubleArray(a: array<int>) returns (b: array<int>)
  ensures fresh(b)
  ensures b.Length == a.Length
  ensures forall i :: 0 <= i < a.Length ==> b[i] == 2 * a[i]
{
  b := new int[a.Length];
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k < i ==> b[k] == 2 * a[k]
  {
    b[i] := 2 * a[i];
    i := i + 1;
  }
}
"""),
    T("seq_max_iter", "medium", "Compute the maximum of a non-empty sequence, as defined by the recursive SeqMax.",
      """method MaxOfSeq(s: seq<int>) returns (m: int)
  requires |s| > 0
  ensures m == SeqMax(s)
""",
      """method MaxOfSeq(s: seq<int>) returns (m: int)
  requires |s| > 0
  ensures m == SeqMax(s)
{
  m := s[0];
  var i := 1;
  while i < |s|
    invariant 1 <= i <= |s|
    invariant m == SeqMax(s[..i])
  {
    assert s[..i + 1][..i] == s[..i];
    if s[i] > m {
      m := s[i];
    }
    i := i + 1;
  }
  assert s[..|s|] == s;
}
""", MAXSEQ),
    T("pow2_positive", "medium", "Prove that every power of two is at least one, and that Pow2 is strictly increasing.",
      """lemma Pow2Grows(n: nat)
  ensures 1 <= Pow2(n) < Pow2(n + 1)
""",
      """lemma Pow2Grows(n: nat)
  ensures 1 <= Pow2(n) < Pow2(n + 1)
{
  if n > 0 {
    Pow2Grows(n - 1);
  }
}
""", POW2),
    T("count_down", "medium", "Return an array [n-1, n-2, ..., 0].",
      """method CountDown(n: nat) returns (a: array<int>)
  ensures fresh(a)
  ensures a.Length == n
  ensures forall i :: 0 <= i < n ==> a[i] == n - 1 - i
""",
      """method CountDown(n: nat) returns (a: array<int>)
  ensures fresh(a)
  ensures a.Length == n
  ensures forall i :: 0 <= i < n ==> a[i] == n - 1 - i
{
  a := new int[n];
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant forall k :: 0 <= k < i ==> a[k] == n - 1 - k
  {
    a[i] := n - 1 - i;
    i := i + 1;
  }
}
"""),
    T("stack_class", "medium",
      "A bounded stack of integers stored in a sequence: Push adds on top, Pop removes the top element.",
      """class Stack {
  var items: seq<int>
  constructor ()
    ensures items == []
  method Push(x: int)
    modifies this
    ensures items == old(items) + [x]
  method Pop() returns (x: int)
    requires |items| > 0
    modifies this
    ensures x == old(items)[|old(items)| - 1]
    ensures items == old(items)[..|old(items)| - 1]
}
""",
      """class Stack {
  var items: seq<int>
  constructor ()
    ensures items == []
  {
    items := [];
  }
  method Push(x: int)
    modifies this
    ensures items == old(items) + [x]
  {
    items := items + [x];
  }
  method Pop() returns (x: int)
    requires |items| > 0
    modifies this
    ensures x == old(items)[|old(items)| - 1]
    ensures items == old(items)[..|old(items)| - 1]
  {
    x := items[|items| - 1];
    items := items[..|items| - 1];
  }
}
"""),
    # =========================================================================================
    # hard
    T("binary_search", "hard",
      "Search a sorted array for a key by binary search; return an index holding the key, or -1 when absent.",
      """method BinarySearch(a: array<int>, key: int) returns (r: int)
  requires Sorted(a[..])
  ensures 0 <= r ==> r < a.Length && a[r] == key
  ensures r < 0 ==> forall i :: 0 <= i < a.Length ==> a[i] != key
""",
      """method BinarySearch(a: array<int>, key: int) returns (r: int)
  requires Sorted(a[..])
  ensures 0 <= r ==> r < a.Length && a[r] == key
  ensures r < 0 ==> forall i :: 0 <= i < a.Length ==> a[i] != key
{
  var lo, hi := 0, a.Length;
  while lo < hi
    invariant 0 <= lo <= hi <= a.Length
    invariant forall i :: 0 <= i < lo ==> a[i] < key
    invariant forall i :: hi <= i < a.Length ==> a[i] > key
    decreases hi - lo
  {
    var mid := lo + (hi - lo) / 2;
    if a[mid] < key {
      lo := mid + 1;
    } else if a[mid] > key {
      hi := mid;
    } else {
      return mid;
    }
  }
  r := -1;
}
""", SORTED),
    T("insertion_sort", "hard",
      "Sort an array in place into non-decreasing order; the result is a permutation of the input.",
      """method InsertionSort(a: array<int>)
  modifies a
  ensures Sorted(a[..])
  ensures multiset(a[..]) == multiset(old(a[..]))
""",
      """method InsertionSort(a: array<int>)
  modifies a
  ensures Sorted(a[..])
  ensures multiset(a[..]) == multiset(old(a[..]))
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant Sorted(a[..i])
    invariant multiset(a[..]) == multiset(old(a[..]))
  {
    var j := i;
    while j > 0 && a[j - 1] > a[j]
      invariant 0 <= j <= i
      invariant multiset(a[..]) == multiset(old(a[..]))
      invariant forall p, q :: 0 <= p < q <= i && q != j ==> a[p] <= a[q]
    {
      a[j - 1], a[j] := a[j], a[j - 1];
      j := j - 1;
    }
    i := i + 1;
  }
}
""", SORTED),
    T("reverse_in_place", "hard", "Reverse an array in place.",
      """method Reverse(a: array<int>)
  modifies a
  ensures forall i :: 0 <= i < a.Length ==> a[i] == old(a[a.Length - 1 - i])
""",
      """method Reverse(a: array<int>)
  modifies a
  ensures forall i :: 0 <= i < a.Length ==> a[i] == old(a[a.Length - 1 - i])
{
  var i, j := 0, a.Length - 1;
  while i < j
    invariant 0 <= i <= a.Length && -1 <= j < a.Length
    invariant i + j == a.Length - 1
    invariant forall k :: 0 <= k < i ==> a[k] == old(a[a.Length - 1 - k])
    invariant forall k :: j < k < a.Length ==> a[k] == old(a[a.Length - 1 - k])
    invariant forall k :: i <= k <= j ==> a[k] == old(a[k])
  {
    a[i], a[j] := a[j], a[i];
    i, j := i + 1, j - 1;
  }
}
"""),
    T("array_sum_front", "hard",
      "Return the sum of an array, where the sum is defined recursively from the front of the sequence.",
      """method ArraySumF(a: array<int>) returns (s: int)
  ensures s == SumF(a[..])
""",
      """lemma SumFAppend(s: seq<int>, x: int)
  ensures SumF(s + [x]) == SumF(s) + x
{
  if |s| == 0 {
    assert s + [x] == [x];
  } else {
    assert (s + [x])[1..] == s[1..] + [x];
    SumFAppend(s[1..], x);
  }
}

method ArraySumF(a: array<int>) returns (s: int)
  ensures s == SumF(a[..])
{
  s := 0;
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant s == SumF(a[..i])
  {
    assert a[..i + 1] == a[..i] + [a[i]];
    SumFAppend(a[..i], a[i]);
    s := s + a[i];
    i := i + 1;
  }
  assert a[..a.Length] == a[..];
}
""", SUM_FRONT),
    T("fast_power", "hard", "Compute b to the power e by repeated squaring, in O(log e) multiplications.",
      """method FastPow(b: int, e: nat) returns (p: int)
  ensures p == Pow(b, e)
""",
      """lemma PowAdd(b: int, m: nat, n: nat)
  ensures Pow(b, m + n) == Pow(b, m) * Pow(b, n)
{
  if m > 0 {
    PowAdd(b, m - 1, n);
  }
}

lemma PowSquare(b: int, n: nat)
  ensures Pow(b * b, n) == Pow(b, 2 * n)
{
  if n > 0 {
    PowSquare(b, n - 1);
    PowAdd(b, 2, 2 * n - 2);
  }
}

method FastPow(b: int, e: nat) returns (p: int)
  ensures p == Pow(b, e)
{
  var x, k := b, e;
  p := 1;
  while k > 0
    invariant p * Pow(x, k) == Pow(b, e)
  {
    if k % 2 == 1 {
      PowAdd(x, 1, k - 1);
      p := p * x;
      k := k - 1;
    } else {
      PowSquare(x, k / 2);
      x := x * x;
      k := k / 2;
    }
  }
}
""", POW),
    T("fib_monotone", "hard", "Prove that the Fibonacci sequence is non-decreasing: Fib(m) <= Fib(n) when m <= n.",
      """lemma FibMono(m: nat, n: nat)
  requires m <= n
  ensures Fib(m) <= Fib(n)
""",
      """lemma FibStep(n: nat)
  ensures Fib(n) <= Fib(n + 1)
{
  if n >= 2 {
    FibStep(n - 1);
  }
}

lemma FibMono(m: nat, n: nat)
  requires m <= n
  ensures Fib(m) <= Fib(n)
  decreases n - m
{
  if m < n {
    FibStep(m);
    FibMono(m + 1, n);
  }
}
""", FIB),
    T("rev_rev", "hard", "Prove that reversing a sequence twice gives back the original sequence.",
      """lemma RevRev(s: seq<int>)
  ensures Rev(Rev(s)) == s
""",
      """lemma RevAppend(s: seq<int>, t: seq<int>)
  ensures Rev(s + t) == Rev(t) + Rev(s)
{
  if |s| == 0 {
    assert s + t == t;
  } else {
    assert (s + t)[1..] == s[1..] + t;
    RevAppend(s[1..], t);
  }
}

lemma RevRev(s: seq<int>)
  ensures Rev(Rev(s)) == s
{
  if |s| > 0 {
    RevAppend(Rev(s[1..]), [s[0]]);
    RevRev(s[1..]);
    assert [s[0]] + s[1..] == s;
  }
}
""", REV),
    T("partition", "hard",
      "Rearrange an array around a pivot: elements smaller than the pivot first, then the others; "
      "return the boundary. The result is a permutation of the input.",
      """method Partition(a: array<int>, pivot: int) returns (lt: int)
  modifies a
  ensures 0 <= lt <= a.Length
  ensures forall i :: 0 <= i < lt ==> a[i] < pivot
  ensures forall i :: lt <= i < a.Length ==> a[i] >= pivot
  ensures multiset(a[..]) == multiset(old(a[..]))
""",
      """method Partition(a: array<int>, pivot: int) returns (lt: int)
  modifies a
  ensures 0 <= lt <= a.Length
  ensures forall i :: 0 <= i < lt ==> a[i] < pivot
  ensures forall i :: lt <= i < a.Length ==> a[i] >= pivot
  ensures multiset(a[..]) == multiset(old(a[..]))
{
  lt := 0;
  var i := 0;
  while i < a.Length
    invariant 0 <= lt <= i <= a.Length
    invariant forall k :: 0 <= k < lt ==> a[k] < pivot
    invariant forall k :: lt <= k < i ==> a[k] >= pivot
    invariant multiset(a[..]) == multiset(old(a[..]))
  {
    if a[i] < pivot {
      a[lt], a[i] := a[i], a[lt];
      lt := lt + 1;
    }
    i := i + 1;
  }
}
"""),
    T("palindrome", "hard", "Decide whether an array reads the same forwards and backwards.",
      """method IsPalindrome(a: array<int>) returns (b: bool)
  ensures b <==> forall i :: 0 <= i < a.Length ==> a[i] == a[a.Length - 1 - i]
""",
      """method IsPalindrome(a: array<int>) returns (b: bool)
  ensures b <==> forall i :: 0 <= i < a.Length ==> a[i] == a[a.Length - 1 - i]
{
  var i := 0;
  while i < a.Length / 2
    invariant 0 <= i <= a.Length / 2
    invariant forall k :: 0 <= k < i ==> a[k] == a[a.Length - 1 - k]
  {
    if a[i] != a[a.Length - 1 - i] {
      return false;
    }
    i := i + 1;
  }
  forall k | 0 <= k < a.Length
    ensures a[k] == a[a.Length - 1 - k]
  {
    var j := a.Length - 1 - k;
    if k >= a.Length / 2 && j < a.Length / 2 {
      assert a[j] == a[a.Length - 1 - j];
    }
  }
  b := true;
}
"""),
    T("selection_sort", "hard", "Sort an array in place by selection sort; the result is a permutation of the input.",
      """method SelectionSort(a: array<int>)
  modifies a
  ensures Sorted(a[..])
  ensures multiset(a[..]) == multiset(old(a[..]))
""",
      """method SelectionSort(a: array<int>)
  modifies a
  ensures Sorted(a[..])
  ensures multiset(a[..]) == multiset(old(a[..]))
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant Sorted(a[..i])
    invariant forall p, q :: 0 <= p < i <= q < a.Length ==> a[p] <= a[q]
    invariant multiset(a[..]) == multiset(old(a[..]))
  {
    var m := i;
    var j := i + 1;
    while j < a.Length
      invariant i <= m < a.Length
      invariant i + 1 <= j <= a.Length
      invariant forall k :: i <= k < j ==> a[m] <= a[k]
    {
      if a[j] < a[m] {
        m := j;
      }
      j := j + 1;
    }
    a[i], a[m] := a[m], a[i];
    i := i + 1;
  }
}
""", SORTED),
    T("odd_sum", "hard", "Prove that the sum of the first n odd numbers is n squared, and compute it with a loop.",
      """lemma OddSumSquare(n: nat)
  ensures SumOdds(n) == n * n

method ComputeOddSum(n: nat) returns (s: nat)
  ensures s == n * n
""",
      """lemma OddSumSquare(n: nat)
  ensures SumOdds(n) == n * n
{
  if n > 0 {
    OddSumSquare(n - 1);
  }
}

method ComputeOddSum(n: nat) returns (s: nat)
  ensures s == n * n
{
  s := 0;
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant s == SumOdds(i)
  {
    i := i + 1;
    s := s + 2 * i - 1;
  }
  OddSumSquare(n);
}
""", SUM_ODDS),
    T("prefix_sums", "hard", "Return the array of prefix sums: element i is the sum of the first i elements of a.",
      """method PrefixSums(a: array<int>) returns (p: array<int>)
  ensures fresh(p)
  ensures p.Length == a.Length + 1
  ensures forall i :: 0 <= i <= a.Length ==> p[i] == Sum(a[..i])
""",
      """method PrefixSums(a: array<int>) returns (p: array<int>)
  ensures fresh(p)
  ensures p.Length == a.Length + 1
  ensures forall i :: 0 <= i <= a.Length ==> p[i] == Sum(a[..i])
{
  p := new int[a.Length + 1];
  p[0] := 0;
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall k :: 0 <= k <= i ==> p[k] == Sum(a[..k])
  {
    assert a[..i + 1][..i] == a[..i];
    p[i + 1] := p[i] + a[i];
    i := i + 1;
  }
}
""", SUM_BACK),
    T("int_log2", "hard", "Compute the integer base-2 logarithm of a positive n: the k with 2^k <= n < 2^(k+1).",
      """method Log2(n: nat) returns (k: nat)
  requires n > 0
  ensures Pow2(k) <= n < Pow2(k + 1)
""",
      """method Log2(n: nat) returns (k: nat)
  requires n > 0
  ensures Pow2(k) <= n < Pow2(k + 1)
{
  k := 0;
  var p := 1;
  while 2 * p <= n
    invariant p == Pow2(k)
    invariant p <= n
    decreases n - p
  {
    p := 2 * p;
    k := k + 1;
  }
}
""", POW2),
    T("has_duplicate", "hard", "Decide whether some value occurs twice in an array.",
      """method HasDuplicate(a: array<int>) returns (b: bool)
  ensures b <==> exists i, j :: 0 <= i < j < a.Length && a[i] == a[j]
""",
      """method HasDuplicate(a: array<int>) returns (b: bool)
  ensures b <==> exists i, j :: 0 <= i < j < a.Length && a[i] == a[j]
{
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant forall p, q :: 0 <= p < q < a.Length && p < i ==> a[p] != a[q]
  {
    var j := i + 1;
    while j < a.Length
      invariant i + 1 <= j <= a.Length
      invariant forall q :: i < q < j ==> a[i] != a[q]
    {
      if a[i] == a[j] {
        return true;
      }
      j := j + 1;
    }
    i := i + 1;
  }
  return false;
}
"""),
    T("gcd_euclid", "hard", "Compute the greatest common divisor with Euclid's algorithm on remainders.",
      """method EuclidGcd(a: nat, b: nat) returns (g: nat)
  requires a > 0 || b > 0
  ensures g == Gcd(a, b)
""",
      """lemma GcdSub(a: nat, b: nat, k: nat)
  requires b > 0 && a >= k * b
  ensures Gcd(a, b) == Gcd(a - k * b, b)
  decreases k
{
  if k > 0 {
    assert a > 0;
    assert Gcd(a, b) == Gcd(a - b, b);
    GcdSub(a - b, b, k - 1);
  }
}

lemma GcdSym(a: nat, b: nat)
  requires a > 0 || b > 0
  ensures Gcd(a, b) == Gcd(b, a)
  decreases a + b
{
  if a > 0 && b > 0 {
    if a >= b {
      if a > b {
        GcdSym(a - b, b);
      }
    } else {
      GcdSym(a, b - a);
    }
  }
}

method EuclidGcd(a: nat, b: nat) returns (g: nat)
  requires a > 0 || b > 0
  ensures g == Gcd(a, b)
{
  var x, y := a, b;
  while y != 0
    invariant x > 0 || y > 0
    invariant Gcd(x, y) == Gcd(a, b)
    decreases y
  {
    GcdSub(x, y, x / y);
    assert x - (x / y) * y == x % y;
    GcdSym(x % y, y);
    x, y := y, x % y;
  }
  g := x;
}
""", GCD),
]
