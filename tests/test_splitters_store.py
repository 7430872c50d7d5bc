import pytest

from fragrel_integrations import Fragment, FragmentStore, split_lines, split_turns, split_words


def test_split_words_windows_and_stride():
    frs = split_words("a b c d e f g", fragment_words=3, doc_id="d")
    assert [f.text for f in frs] == ["a b c", "d e f", "g"]
    assert [(f.doc_id, f.position) for f in frs] == [("d", 0), ("d", 1), ("d", 2)]
    assert [f.text for f in split_words("a b c d e", fragment_words=3, stride=2)] == ["a b c", "c d e"]
    assert split_words("   ") == []


def test_split_lines_repocoder_windows():
    code = "\n".join(f"line{i}" for i in range(1, 36))
    frs = split_lines(code)
    assert [(f.metadata["start_line"], f.metadata["end_line"]) for f in frs] == [(1, 20), (11, 30), (21, 35)]


def test_split_turns():
    frs = split_turns([{"speaker": "A", "text": "hi", "dia_id": "D1:1"}, "bye"], doc_id="chat")
    assert [f.text for f in frs] == ["A: hi", "bye"]
    assert frs[0].metadata == {"speaker": "A", "dia_id": "D1:1"}
    with pytest.raises(TypeError, match="text"):
        split_turns([{"speaker": "A"}])


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_split_bad_window(size):
    with pytest.raises(ValueError):
        split_words("a b", fragment_words=size)


def test_split_bad_stride():
    with pytest.raises(ValueError, match="stride"):
        split_lines("a\nb", fragment_lines=2, stride=3)


def test_fragment_validates_types():
    with pytest.raises(TypeError):
        Fragment(3)
    with pytest.raises(TypeError):
        Fragment("a", position="1")
    assert Fragment("a", doc_id=7).doc_id == "7"


def test_store_roundtrip_and_neighbours(tmp_path):
    path = tmp_path / "f.sqlite"
    store = FragmentStore(path)
    store.add([Fragment(t, "d", i, {"i": i}) for i, t in enumerate("abcde")] + [Fragment("z", "e", 0)])
    store.close()
    again = FragmentStore(path)
    assert len(again) == 6
    assert again.get("d", 2) == Fragment("c", "d", 2, {"i": 2})
    assert again.get("d", 9) is None
    assert [f.text for f in again.neighbours([("d", 2)], radius=2)] == ["a", "b", "d", "e"]
    assert again.neighbours([("d", 2), ("d", 3)], radius=1) == [again.get("d", 1), again.get("d", 4)]


def test_store_rejects_bad_input_atomically():
    store = FragmentStore()
    with pytest.raises(TypeError, match="JSON"):
        store.add([Fragment("a", "d", 0), Fragment("b", "d", 1, {"x": object()})])
    assert len(store) == 0
    with pytest.raises(TypeError):
        store.add(["text"])
    with pytest.raises(ValueError, match="radius"):
        store.neighbours([("d", 0)], radius=-1)
