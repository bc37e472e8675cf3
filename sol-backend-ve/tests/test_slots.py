from __future__ import annotations

from sol_backend_ve.slots import Slot, find_slots, visible_slots

SLOTS = [Slot(0, 1), Slot(1, 0), Slot(3, 3)]


def test_slots_follow_the_udev_symlinks(ve_tree):
    dev, _ = ve_tree({1: (0, {}), 0: (1, {})})
    assert find_slots(dev) == [Slot(slot=0, node=1), Slot(slot=1, node=0)]


def test_slot_without_symlink_is_its_own_node(tmp_path):
    (tmp_path / "veslot2").write_text("")
    (tmp_path / "veslotX").write_text("")  # not a slot
    assert find_slots(tmp_path) == [Slot(2, 2)]
    assert find_slots(tmp_path / "absent") == []


def test_unset_or_blank_selects_all():
    assert visible_slots(SLOTS, None) == SLOTS
    assert visible_slots(SLOTS, " ") == SLOTS


def test_selection_keeps_the_given_order():
    assert visible_slots(SLOTS, "3,0") == [Slot(3, 3), Slot(0, 1)]


def test_numa_form_duplicates_and_unknown_entries():
    assert visible_slots(SLOTS, "1.0, 1.1, 7, x, 0") == [Slot(1, 0), Slot(0, 1)]
    assert visible_slots(SLOTS, "7") == []
