//! What every allocator in a benchmark offers: blocks of 4 KiB × 2^order, and a way to
//! touch them.
//!
//! A [`Contestant`] hands out [`Block`]s, owning values that free nothing on drop; giving
//! one back is [`Contestant::free`]. Because a block can only come from its contestant's
//! `alloc` (each adapter keeps its block's constructor private) and borrows that
//! contestant, freeing is safe to call: an adapter checks, with one comparison, that a
//! block it is given is from its own arena, so two instances of one adapter cannot be
//! confused. The harness is generic over this trait, so each contestant's hot loop is the
//! same source code, compiled for it.
//!
//! Linux counterpart: none; mmtests' `pagealloc` module calls `alloc_pages`/`__free_pages`
//! directly, and page_bench04 calls `alloc_pages_bulk_array`.

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::Order;

/// Bytes in a block of `order`: 4 KiB × 2^order.
pub const fn block_bytes(order: Order) -> usize {
    PAGE_SIZE << order.get()
}

/// A block as one word: its address, which is 4 KiB-aligned, with its order in the bits
/// below 4 KiB (`MAX_ORDER` < 4096). Every peer's block, the floors' and `mmkit`'s are
/// one of these plus a zero-sized borrow, so the harness stores and moves the same 8
/// bytes per block for each of them (until session 8 the handles were 16 to 24 bytes,
/// and not the same size for all); what an adapter needs besides the address (a pfn, a
/// frame number) it derives from the address and its arena's base, as a user holding
/// only the pointer would. Only mmkit's other entries keep larger handles, which can
/// only slow them: `mmkit-handle` is the runtime's own `PageBlock` (16 bytes, it holds
/// the pool), `mmkit-cache` records the cache a page came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaggedBlock(usize);

impl TaggedBlock {
    /// The bits below the page size, which hold the order.
    const ORDER_BITS: usize = PAGE_SIZE - 1;

    /// The block of `order` at `addr`, which must be 4 KiB-aligned.
    #[inline(always)]
    pub fn new(addr: usize, order: Order) -> TaggedBlock {
        debug_assert_eq!(addr & Self::ORDER_BITS, 0, "{addr:#x} is not page-aligned");
        TaggedBlock(addr | order.get() as usize)
    }

    /// The address of the block's first byte.
    #[inline(always)]
    pub fn addr(self) -> usize {
        self.0 & !Self::ORDER_BITS
    }

    /// The block's order.
    #[inline(always)]
    pub fn order(self) -> Order {
        Order::new((self.0 & Self::ORDER_BITS) as u8).expect("the tag holds a valid order")
    }

    /// The block's size in bytes.
    #[inline(always)]
    pub fn size(self) -> usize {
        block_bytes(self.order())
    }

    /// The word itself: address | order. An order-0 block's offset from a base, rotated
    /// right by the page shift, is its page number, with any order bits on top where a
    /// range check refuses them together with a foreign address (`mmkit`'s bulk free).
    #[inline(always)]
    pub fn word(self) -> usize {
        self.0
    }
}

/// The bytes of one block: 4 KiB × 2^order, aligned to 4 KiB, owned by the value.
pub trait Block: Send {
    /// The block's memory.
    fn bytes(&self) -> &[u8];
    /// The block's memory, to write.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The address of the first byte.
    fn addr(&self) -> usize {
        self.bytes().as_ptr() as usize
    }
}

/// An allocator under test.
///
/// `free` must accept blocks allocated on another thread (the `remote` patterns).
pub trait Contestant: Sync {
    /// What `alloc` hands out.
    type Block<'a>: Block
    where
        Self: 'a;

    /// A block of 4 KiB × 2^`order`, aligned to 4 KiB; `None` when out of memory.
    fn alloc(&self, order: Order) -> Option<Self::Block<'_>>;

    /// Give a block back.
    fn free<'a>(&'a self, block: Self::Block<'a>);

    /// Append up to `n` order-0 blocks to `out`; returns how many were appended. The
    /// default is a loop of [`Contestant::alloc`], for allocators without a bulk API.
    fn alloc_bulk<'a>(&'a self, n: usize, out: &mut Vec<Self::Block<'a>>) -> usize {
        let before = out.len();
        for _ in 0..n {
            match self.alloc(Order::ZERO) {
                Some(block) => out.push(block),
                None => break,
            }
        }
        out.len() - before
    }

    /// Free every block of `blocks`, last first, leaving it empty. The default is a loop
    /// of [`Contestant::free`].
    fn free_bulk<'a>(&'a self, blocks: &mut Vec<Self::Block<'a>>) {
        while let Some(block) = blocks.pop() {
            self.free(block);
        }
    }

    /// Called once on each benchmark thread before it allocates, with the thread's index
    /// (mmkit serves that thread from the pageset of that CPU).
    fn enter_thread(&self, _thread: u32) {}

    /// After a benchmark: check that everything handed out came back and the allocator's
    /// structures are intact, where the allocator can say.
    fn audit(&self) -> Result<(), String> {
        Ok(())
    }

    /// One line on how this contestant is set up.
    fn describe(&self) -> String;
}

/// What the harness writes into each block after allocating it and reads back (and
/// checks) before freeing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Touch {
    /// Nothing: the allocator's own work only.
    None,
    /// One `u64` at the start of the block.
    Block,
    /// One `u64` at the start of every 4 KiB page of the block (the same as `Block` at
    /// order 0).
    #[default]
    Page,
}

impl Touch {
    /// Write `value` where this touch pattern writes.
    #[inline(always)]
    pub fn write<B: Block>(self, block: &mut B, value: u64) {
        match self {
            Touch::None => {}
            Touch::Block => write_word(block.bytes_mut(), 0, value),
            Touch::Page => {
                let bytes = block.bytes_mut();
                let mut offset = 0;
                while offset < bytes.len() {
                    write_word(bytes, offset, value);
                    offset += PAGE_SIZE;
                }
            }
        }
    }

    /// Read back what [`Touch::write`] wrote; `false` if any word differs from `value`.
    #[inline(always)]
    pub fn check<B: Block>(self, block: &B, value: u64) -> bool {
        match self {
            Touch::None => true,
            Touch::Block => read_word(block.bytes(), 0) == value,
            Touch::Page => {
                let bytes = block.bytes();
                let mut same = true;
                let mut offset = 0;
                while offset < bytes.len() {
                    same &= read_word(bytes, offset) == value;
                    offset += PAGE_SIZE;
                }
                same
            }
        }
    }
}

#[inline(always)]
fn write_word(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
}

/// A real load: `black_box` keeps the compiler from forwarding the earlier store.
#[inline(always)]
fn read_word(bytes: &[u8], offset: usize) -> u64 {
    let word: [u8; 8] = std::hint::black_box(&bytes[offset..offset + 8])
        .try_into()
        .expect("an 8-byte range");
    u64::from_ne_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Heap(Vec<u8>);

    impl Block for Heap {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    #[test]
    fn page_touch_writes_every_page_and_checks_them() {
        let mut block = Heap(vec![0; 4 * PAGE_SIZE]);
        Touch::Page.write(&mut block, 0xfeed);
        assert!(Touch::Page.check(&block, 0xfeed));
        block.0[2 * PAGE_SIZE] ^= 1;
        assert!(!Touch::Page.check(&block, 0xfeed));
        assert!(
            Touch::Block.check(&block, 0xfeed),
            "the first page is intact"
        );
        assert!(Touch::None.check(&block, 1));
    }
}
