//! Slots: chunks listed by the largest free run they hold, plus three lists for the
//! chunks partial depopulation sets aside.
//!
//! Linux counterpart: `pcpu_size_to_slot`, `__pcpu_size_to_slot`, `pcpu_chunk_slot`,
//! `pcpu_chunk_lists[]` and `pcpu_sidelined_slot`/`pcpu_free_slot`/
//! `pcpu_to_depopulate_slot` in `mm/percpu.c` (v5.14). The lists themselves are linked
//! through the chunks by index ([`super::chunk::Chunk`]'s `list_prev`/`list_next`), as
//! Linux links `struct pcpu_chunk` through `list`.

/// `PCPU_SLOT_BASE_SHIFT`: slot 1 holds runs up to 2^5 − 1 bytes.
pub const PCPU_SLOT_BASE_SHIFT: u32 = 5;
/// `PCPU_SLOT_FAIL_THRESHOLD`: a chunk in a slot below this that fails a fit moves to
/// slot 0, so small requests stop scanning it.
pub const PCPU_SLOT_FAIL_THRESHOLD: usize = 3;

/// `__pcpu_size_to_slot`: `max(fls(bytes) − PCPU_SLOT_BASE_SHIFT + 2, 1)`.
///
/// ```
/// use mmkit_core::percpu::size_to_slot;
/// assert_eq!(size_to_slot(15), 1);   // fls 4 → 4 − 5 + 2 = 1
/// assert_eq!(size_to_slot(4096), 10); // fls 13 → 10
/// ```
pub fn size_to_slot(bytes: usize) -> usize {
    let fls = usize::BITS - bytes.leading_zeros();
    (fls as isize - PCPU_SLOT_BASE_SHIFT as isize + 2).max(1) as usize
}

/// The slot numbers for one unit size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SlotLayout {
    /// `pcpu_unit_size`.
    pub unit_size: usize,
    /// `pcpu_sidelined_slot`: isolated chunks whose empty pages were reclaimed.
    pub sidelined: usize,
    /// `pcpu_free_slot`: fully free chunks.
    pub free: usize,
    /// `pcpu_to_depopulate_slot`: isolated chunks waiting for the balance work; never
    /// searched by allocations.
    pub to_depopulate: usize,
    /// `pcpu_nr_slots`.
    pub nr_slots: usize,
}

impl SlotLayout {
    /// The layout for `unit_size`: active slots `0..=size_to_slot(unit_size)`, then
    /// sidelined, free and to_depopulate. v5.13 had no sidelined or to_depopulate slot;
    /// we keep the same numbering for every policy (the extra lists stay empty).
    ///
    /// ```
    /// use mmkit_core::percpu::SlotLayout;
    /// let layout = SlotLayout::new(32 << 10);
    /// assert_eq!((layout.sidelined, layout.free, layout.to_depopulate, layout.nr_slots), (14, 15, 16, 17));
    /// ```
    pub fn new(unit_size: usize) -> SlotLayout {
        let sidelined = size_to_slot(unit_size) + 1;
        SlotLayout {
            unit_size,
            sidelined,
            free: sidelined + 1,
            to_depopulate: sidelined + 2,
            nr_slots: sidelined + 3,
        }
    }

    /// `pcpu_size_to_slot`: a whole unit maps to the free slot.
    pub fn size_to_slot(&self, bytes: usize) -> usize {
        if bytes == self.unit_size {
            self.free
        } else {
            size_to_slot(bytes)
        }
    }

    /// `pcpu_chunk_slot`: slot 0 for a chunk with no usable free run, else the slot of its
    /// contig hint.
    pub fn chunk_slot(&self, free_bytes: usize, contig_hint_bits: usize) -> usize {
        if free_bytes < super::PCPU_MIN_ALLOC_SIZE || contig_hint_bits == 0 {
            0
        } else {
            self.size_to_slot(contig_hint_bits * super::PCPU_MIN_ALLOC_SIZE)
        }
    }
}

/// The ends of one slot list (chunk indexes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct SlotList {
    pub(crate) head: Option<usize>,
    pub(crate) tail: Option<usize>,
}
