"""Bookkeeping of the paged KV pool: pages of 16 token slots, no torch here.

A slot is one token's K and V in every layer (the runner owns the tensors).
Prefix-tree nodes hold slots; a page is referenced by every node holding one
of its slots and goes back to the free list when the last one releases it.
"""
from __future__ import annotations

PAGE = 16


class OutOfPages(RuntimeError):
    pass


class PagePool:
    def __init__(self, num_slots: int, page_size: int = PAGE):
        if num_slots < page_size:
            raise ValueError(f"KV pool needs at least one page of {page_size} slots, got {num_slots}")
        self.page_size = page_size
        self.num_pages = num_slots // page_size
        self.free_pages: list[int] = list(range(self.num_pages - 1, -1, -1))
        self.refs = [0] * self.num_pages

    @property
    def num_free(self) -> int:
        return len(self.free_pages)

    def pages_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.page_size)

    def can_allocate(self, n_tokens: int) -> bool:
        return self.pages_for(n_tokens) <= len(self.free_pages)

    def allocate(self, n_tokens: int) -> list[int]:
        """Slots for n tokens on fresh pages (the tail page's spare slots stay unused)."""
        need = self.pages_for(n_tokens)
        if need > len(self.free_pages):
            raise OutOfPages(f"need {need} pages, {len(self.free_pages)} free")
        ps = self.page_size
        slots: list[int] = []
        for _ in range(need):
            p = self.free_pages.pop()
            self.refs[p] = 1
            slots.extend(range(p * ps, p * ps + ps))
        return slots[:n_tokens]

    def pages_of(self, slots: list[int]) -> list[int]:
        ps, seen, out = self.page_size, set(), []
        for s in slots:
            p = s // ps
            if p not in seen:
                seen.add(p)
                out.append(p)
        return out

    def retain(self, slots: list[int]):
        """One more holder for the pages of these slots (a node split in two)."""
        for p in self.pages_of(slots):
            self.refs[p] += 1

    def release(self, slots: list[int]):
        """Drop one holder of the pages of these slots; free pages nobody holds."""
        for p in self.pages_of(slots):
            self.refs[p] -= 1
            if self.refs[p] == 0:
                self.free_pages.append(p)
            elif self.refs[p] < 0:
                raise AssertionError(f"page {p} released more often than held")

    def used_pages(self) -> int:
        return self.num_pages - len(self.free_pages)
