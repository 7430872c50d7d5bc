"""Random-hyperplane LSH: seeded and deterministic, codes match the sign definition, collision rates follow
1 - θ/π, multi-probe raises recall, the in-memory index agrees with an exact scan, and bad settings raise."""

from __future__ import annotations

import numpy as np
import pytest

from fragrel_integrations.core.triplets import LSHIndex, RandomHyperplaneLSH, collision_probability


def _pair_at_cosine(rng, dim, cos):
    a = rng.standard_normal(dim)
    a /= np.linalg.norm(a)
    r = rng.standard_normal(dim)
    r -= (r @ a) * a
    r /= np.linalg.norm(r)
    return a, cos * a + np.sqrt(1 - cos**2) * r


def test_same_seed_same_hyperplanes_other_seed_differs():
    a = RandomHyperplaneLSH(16, bits=8, tables=4, seed=5)
    b = RandomHyperplaneLSH(16, bits=8, tables=4, seed=5)
    c = RandomHyperplaneLSH(16, bits=8, tables=4, seed=6)
    np.testing.assert_array_equal(a.hyperplanes, b.hyperplanes)
    assert not np.array_equal(a.hyperplanes, c.hyperplanes)
    assert a.config() == {"dim": 16, "bits": 8, "tables": 4, "seed": 5}
    np.testing.assert_array_equal(RandomHyperplaneLSH.from_config(a.config()).hyperplanes, a.hyperplanes)


def test_codes_are_the_sign_bits_of_each_table():
    lsh = RandomHyperplaneLSH(6, bits=3, tables=2, seed=0)
    v = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    codes = lsh.codes(v)
    planes = lsh.hyperplanes.reshape(2, 3, 6)
    for i in range(5):
        for t in range(2):
            bits = (planes[t] @ v[i]) > 0
            assert codes[i, t] == sum(int(b) << j for j, b in enumerate(bits))
    keys = lsh.band_keys(v)
    assert np.all(keys[:, 1] - codes[:, 1] == 8) and np.all(keys[:, 0] == codes[:, 0])
    assert np.array_equal(lsh.codes(3.0 * v), codes)  # scale-invariant: cosine LSH


def test_bit_agreement_follows_one_minus_angle_over_pi():
    rng = np.random.default_rng(0)
    lsh = RandomHyperplaneLSH(64, bits=16, tables=64, seed=1)  # 1024 hyperplanes
    for cos in (0.9, 0.5, 0.0):
        agree = []
        for _ in range(20):
            a, b = _pair_at_cosine(rng, 64, cos)
            sa = (lsh.hyperplanes @ a) > 0
            sb = (lsh.hyperplanes @ b) > 0
            agree.append(np.mean(sa == sb))
        assert np.mean(agree) == pytest.approx(1 - np.arccos(cos) / np.pi, abs=0.02)


def test_multiprobe_probes_every_code_one_bit_away():
    lsh0 = RandomHyperplaneLSH(8, bits=5, tables=3, seed=2, probe_radius=0)
    lsh1 = RandomHyperplaneLSH(8, bits=5, tables=3, seed=2, probe_radius=1)
    v = np.ones(8, dtype=np.float32)
    assert lsh0.probe_keys(v).size == 3
    keys1 = lsh1.probe_keys(v)
    assert keys1.size == 3 * 6 and set(lsh0.probe_keys(v)) <= set(keys1)
    own = lsh1.codes(v)[0]
    for t in range(3):
        table_keys = [k - (t << 5) for k in keys1 if (k >> 5) == t]
        assert sorted(bin(int(k) ^ int(own[t])).count("1") for k in table_keys) == [0] + [1] * 5


def test_measured_recall_matches_the_collision_formula_and_probing_helps():
    rng = np.random.default_rng(3)
    dim, n = 48, 300
    for radius in (0, 1):
        lsh = RandomHyperplaneLSH(dim, bits=10, tables=6, seed=4, probe_radius=radius)
        hits = 0
        for _ in range(n):
            a, b = _pair_at_cosine(rng, dim, 0.8)
            hits += bool(set(lsh.probe_keys(a)) & set(lsh.band_keys(b)[0]))
        expected = collision_probability(0.8, bits=10, tables=6, probe_radius=radius)
        assert hits / n == pytest.approx(expected, abs=0.08)
    assert collision_probability(0.8, 10, 6, 1) > collision_probability(0.8, 10, 6, 0)


def test_index_agrees_with_exact_scan_on_near_duplicates():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((5000, 32)).astype(np.float32)
    index = LSHIndex(RandomHyperplaneLSH(32, bits=12, tables=16, seed=0))
    index.add(data, ids=np.arange(5000) + 100)
    agree = 0
    for i in rng.choice(5000, 50, replace=False):
        q = data[i] + 0.15 * np.linalg.norm(data[i]) / np.sqrt(32) * rng.standard_normal(32)
        exact = index.scan(q, threshold=0.8)
        approx = index.query(q, threshold=0.8)
        assert exact and exact[0][0] == i + 100
        agree += bool(approx) and approx[0] == pytest.approx(exact[0])
    assert agree >= 48
    assert index.query(rng.standard_normal(32), threshold=0.8) == []  # random query: nothing that close
    assert index.candidates(data[0]).size < 5000 // 4  # LSH looks at a small part of the data


def test_max_candidates_keeps_the_most_colliding():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((2000, 16)).astype(np.float32)
    index = LSHIndex(RandomHyperplaneLSH(16, bits=6, tables=12, seed=0))
    index.add(data)
    cands = index.candidates(data[7], max_candidates=5)
    assert cands.size == 5 and 7 in cands.tolist()


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"dim": 0}, ValueError, "dim"),
        ({"dim": 8, "bits": 0}, ValueError, "bits"),
        ({"dim": 8, "bits": 49}, ValueError, "bits"),
        ({"dim": 8, "tables": 0}, ValueError, "tables"),
        ({"dim": 8, "tables": 5000}, ValueError, "tables"),
        ({"dim": 8, "probe_radius": 3}, ValueError, "probe_radius"),
        ({"dim": 8, "bits": 1.5}, TypeError, "bits"),
        ({"dim": 8, "seed": "x"}, TypeError, "seed"),
    ],
)
def test_constructor_validates(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        RandomHyperplaneLSH(**kwargs)


def test_wrong_dimension_or_nan_is_rejected():
    lsh = RandomHyperplaneLSH(4)
    with pytest.raises(ValueError, match="dimension 4"):
        lsh.codes(np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        lsh.codes(np.array([1.0, np.nan, 0, 0]))
