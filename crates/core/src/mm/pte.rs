//! Page-table entries: what a virtual page maps to.
//!
//! Linux counterpart: `pte_t` with `pte_present`, `pte_young`, `pte_dirty`, and swap
//! entries (`swp_entry_t`, `is_swap_pte`). One 64-bit word per virtual page, as on x86-64.
//!
//! Where we differ: x86's `_PAGE_RW` is stored inverted, as a write-protect bit, so an
//! entry is writable unless fork write-protected it for copy-on-write (every mapping here
//! is writable). A present entry that is writable is also what Linux's `PageAnonExclusive`
//! says for an anonymous page: only fork shares one, and only a write fault that copies or
//! reuses it (`do_wp_page`) makes it exclusive again.

use crate::page::Pfn;

const PRESENT: u64 = 1 << 0;
const ACCESSED: u64 = 1 << 1;
const DIRTY: u64 = 1 << 2;
const SWAP: u64 = 1 << 3;
const WRITE_PROTECTED: u64 = 1 << 4;
const SHIFT: u32 = 12;

/// A swap slot: where a swapped-out page's data is (`swp_entry_t`, one swap device).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct SwapEntry(pub u64);

/// One page-table entry.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Pte(u64);

/// What a [`Pte`] holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PteState {
    /// Nothing: a fault allocates or reads.
    None,
    /// A frame, with the accessed and dirty bits the hardware sets.
    Present {
        /// The page mapped.
        pfn: Pfn,
        /// `pte_young`.
        accessed: bool,
        /// `pte_dirty`.
        dirty: bool,
    },
    /// Swapped out: the slot holding the data.
    Swap(SwapEntry),
}

impl Pte {
    /// The empty entry.
    pub const NONE: Pte = Pte(0);

    /// An entry mapping `pfn`.
    pub fn present(pfn: Pfn, accessed: bool, dirty: bool) -> Pte {
        let mut bits = (pfn.0 << SHIFT) | PRESENT;
        if accessed {
            bits |= ACCESSED;
        }
        if dirty {
            bits |= DIRTY;
        }
        Pte(bits)
    }

    /// A swap entry.
    pub fn swap(entry: SwapEntry) -> Pte {
        Pte((entry.0 << SHIFT) | SWAP)
    }

    /// What the entry holds.
    pub fn state(self) -> PteState {
        if self.0 & PRESENT != 0 {
            PteState::Present {
                pfn: Pfn(self.0 >> SHIFT),
                accessed: self.0 & ACCESSED != 0,
                dirty: self.0 & DIRTY != 0,
            }
        } else if self.0 & SWAP != 0 {
            PteState::Swap(SwapEntry(self.0 >> SHIFT))
        } else {
            PteState::None
        }
    }

    /// The mapped frame, if present.
    pub fn pfn(self) -> Option<Pfn> {
        (self.0 & PRESENT != 0).then_some(Pfn(self.0 >> SHIFT))
    }

    /// Set the bits the hardware sets on an access (`pte_mkyoung`, and `pte_mkdirty` on a
    /// write). No effect on a non-present entry.
    pub fn touch(&mut self, write: bool) {
        if self.0 & PRESENT != 0 {
            self.0 |= ACCESSED;
            if write {
                self.0 |= DIRTY;
            }
        }
    }

    /// Whether a write must fault first (`!pte_write`): fork write-protected a private
    /// anonymous entry, and the page may be shared.
    pub fn write_protected(self) -> bool {
        self.0 & (PRESENT | WRITE_PROTECTED) == PRESENT | WRITE_PROTECTED
    }

    /// `pte_wrprotect`: writes fault until `do_wp_page` copies or reuses the page. No
    /// effect on a non-present entry.
    pub fn wrprotect(&mut self) {
        if self.0 & PRESENT != 0 {
            self.0 |= WRITE_PROTECTED;
        }
    }

    /// `pte_mkwrite`: a write fault reused the page; writes no longer fault.
    pub fn mkwrite(&mut self) {
        self.0 &= !WRITE_PROTECTED;
    }

    /// `pte_mkold`: clear the accessed bit (fork gives the child old entries).
    pub fn mkold(self) -> Pte {
        Pte(self.0 & !ACCESSED)
    }

    /// Clear the accessed bit, returning whether it was set (`ptep_clear_flush_young`).
    pub fn test_and_clear_young(&mut self) -> bool {
        let young = self.0 & (PRESENT | ACCESSED) == PRESENT | ACCESSED;
        self.0 &= !ACCESSED;
        young
    }
}

impl core::fmt::Debug for Pte {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.state().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let pfn = Pfn(0xf_ffff_ffff);
        assert_eq!(
            Pte::present(pfn, false, true).state(),
            PteState::Present {
                pfn,
                accessed: false,
                dirty: true
            }
        );
        assert_eq!(
            Pte::swap(SwapEntry(77)).state(),
            PteState::Swap(SwapEntry(77))
        );
        assert_eq!(Pte::NONE.state(), PteState::None);
        let mut pte = Pte::present(pfn, false, false);
        pte.touch(true);
        assert!(pte.test_and_clear_young());
        assert!(!pte.test_and_clear_young());
        assert_eq!(pte.pfn(), Some(pfn));
    }

    #[test]
    fn a_write_protected_entry_keeps_its_frame_and_bits() {
        let pfn = Pfn(0x1234);
        let mut pte = Pte::present(pfn, true, true);
        assert!(!pte.write_protected());
        pte.wrprotect();
        assert!(pte.write_protected());
        let mut reused = pte;
        reused.mkwrite();
        assert!(!reused.write_protected());
        assert_eq!(
            pte.mkold().state(),
            PteState::Present {
                pfn,
                accessed: false,
                dirty: true
            }
        );
        let mut swap = Pte::swap(SwapEntry(5));
        swap.wrprotect();
        assert_eq!(swap.state(), PteState::Swap(SwapEntry(5)));
        assert!(!swap.write_protected());
    }
}
