//! Page frame numbers and block orders.
//!
//! Linux counterpart: the pfn helpers of `mm/internal.h` (`__find_buddy_pfn`) and the
//! `MAX_ORDER` family of `include/linux/mmzone.h`.

use core::fmt;

/// log2 of the page size: pages are 4 KiB, as on x86-64.
pub const PAGE_SHIFT: u32 = 12;
/// The page size in bytes.
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;
/// The largest buddy order, inclusive (Linux v6.7 `MAX_ORDER`, v6.8 `MAX_PAGE_ORDER`):
/// blocks of up to 2^10 pages = 4 MiB.
pub const MAX_ORDER: u8 = 10;
/// Number of distinct orders, `0..=MAX_ORDER` (Linux v6.8 `NR_PAGE_ORDERS`).
pub const NR_PAGE_ORDERS: usize = MAX_ORDER as usize + 1;

/// A page frame number: the physical address shifted right by [`PAGE_SHIFT`].
///
/// ```
/// use mmkit_core::{Order, Pfn};
///
/// let pfn = Pfn(0x1004);
/// let order2 = Order::new(2).unwrap();
/// assert!(pfn.is_aligned(order2));
/// assert_eq!(pfn.buddy(order2), Pfn(0x1000)); // the block it merges with
/// assert_eq!(pfn.phys_addr(), 0x100_4000);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Pfn(pub u64);

impl Pfn {
    /// The pfn of this block's buddy at `order`: the block it merges with.
    pub const fn buddy(self, order: Order) -> Pfn {
        Pfn(self.0 ^ order.pages())
    }

    /// Whether a block of `order` may start here (block starts are aligned to their size).
    pub const fn is_aligned(self, order: Order) -> bool {
        self.0 & (order.pages() - 1) == 0
    }

    /// The start of the `order`-sized block containing this pfn.
    pub const fn align_down(self, order: Order) -> Pfn {
        Pfn(self.0 & !(order.pages() - 1))
    }

    /// The pfn `pages` frames further on.
    pub const fn add(self, pages: u64) -> Pfn {
        Pfn(self.0 + pages)
    }

    /// The physical address of the frame's first byte.
    pub const fn phys_addr(self) -> u64 {
        self.0 << PAGE_SHIFT
    }
}

impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A block size: 2^order contiguous pages. Always `0..=MAX_ORDER`.
///
/// ```
/// use mmkit_core::Order;
///
/// let thp = Order::new(9).unwrap();
/// assert_eq!(thp.pages(), 512);
/// assert_eq!(thp.up(), Some(Order::MAX));
/// assert_eq!(Order::MAX.pages(), 1024);
/// assert_eq!(Order::new(11), None); // above MAX_ORDER
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Order(u8);

impl Order {
    /// A single page.
    pub const ZERO: Order = Order(0);
    /// The largest block, [`MAX_ORDER`].
    pub const MAX: Order = Order(MAX_ORDER);

    /// The order `order`, or `None` above [`MAX_ORDER`].
    pub const fn new(order: u8) -> Option<Order> {
        if order <= MAX_ORDER {
            Some(Order(order))
        } else {
            None
        }
    }

    /// The order as a number.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// As an index into per-order arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Pages in a block of this order.
    pub const fn pages(self) -> u64 {
        1 << self.0
    }

    /// The next larger order, or `None` at [`MAX_ORDER`].
    pub const fn up(self) -> Option<Order> {
        Order::new(self.0 + 1)
    }

    /// The next smaller order, or `None` at zero.
    pub const fn down(self) -> Option<Order> {
        match self.0.checked_sub(1) {
            Some(o) => Some(Order(o)),
            None => None,
        }
    }

    /// Every order from `0` to [`MAX_ORDER`].
    pub fn all() -> impl DoubleEndedIterator<Item = Order> {
        (0..=MAX_ORDER).map(Order)
    }

    /// Orders from `self` up to [`MAX_ORDER`], ascending.
    pub fn up_to_max(self) -> impl DoubleEndedIterator<Item = Order> {
        (self.0..=MAX_ORDER).map(Order)
    }
}

/// A number that is not an order: above [`MAX_ORDER`] (the error of `Order::try_from`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OrderTooLarge(pub usize);

impl fmt::Display for OrderTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order {} is above MAX_ORDER ({MAX_ORDER})", self.0)
    }
}

impl core::error::Error for OrderTooLarge {}

/// ```
/// use mmkit_core::Order;
///
/// assert_eq!(Order::try_from(3u8).map(Order::pages), Ok(8));
/// assert!(Order::try_from(11u8).is_err());
/// ```
impl TryFrom<u8> for Order {
    type Error = OrderTooLarge;

    fn try_from(order: u8) -> Result<Order, OrderTooLarge> {
        Order::new(order).ok_or(OrderTooLarge(order.into()))
    }
}

/// ```
/// use mmkit_core::Order;
///
/// let order = Order::try_from(10usize)?;
/// assert_eq!(order, Order::MAX);
/// let error = Order::try_from(256usize).unwrap_err();
/// assert_eq!(error.to_string(), "order 256 is above MAX_ORDER (10)");
/// # Ok::<(), mmkit_core::page::OrderTooLarge>(())
/// ```
impl TryFrom<usize> for Order {
    type Error = OrderTooLarge;

    fn try_from(order: usize) -> Result<Order, OrderTooLarge> {
        u8::try_from(order)
            .ok()
            .and_then(Order::new)
            .ok_or(OrderTooLarge(order))
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddy_flips_the_order_bit() {
        let o2 = Order::new(2).unwrap();
        assert_eq!(Pfn(8).buddy(o2), Pfn(12));
        assert_eq!(Pfn(12).buddy(o2), Pfn(8));
        assert_eq!(Pfn(8).buddy(Order::new(3).unwrap()), Pfn(0));
    }

    #[test]
    fn order_rejects_above_max() {
        assert!(Order::new(MAX_ORDER).is_some());
        assert!(Order::new(MAX_ORDER + 1).is_none());
        assert_eq!(Order::MAX.pages(), 1024);
    }

    #[test]
    fn alignment_follows_block_size() {
        let o3 = Order::new(3).unwrap();
        assert!(Pfn(16).is_aligned(o3));
        assert!(!Pfn(12).is_aligned(o3));
        assert_eq!(Pfn(13).align_down(o3), Pfn(8));
    }
}
