//! The page order of a SLUB cache's slabs, as Linux v6.1–v6.7 choose it (`calculate_order`
//! and `calc_slab_order` in `mm/slub.c`; v6.8 reworked the search).
//!
//! SLUB wants enough objects in a slab that its per-CPU and partial lists are not refilled
//! all the time, and asks for more the more CPUs the machine has: at least
//! 4 × (fls(CPUs) + 1) objects (12 on 2 CPUs, 24 on 16–31, 28 on 32–63, 32 on 64–127, 36
//! on 128–255).
//! So the same cache has slabs of a higher order on a bigger machine: `vm_area_struct`
//! (152 bytes in Debian's 6.1) is order 0 up to 31 CPUs and order 1 from 32, and on the
//! published 224-CPU machine every cache of objects over 113 bytes has slabs of order
//! 1–3. An emptied slab is freed to the page allocator as one block of that order, which
//! is where a kernel build's high-order pageset frees come from (docs/EXPERIMENTS.md,
//! "What puts two high-order frees together").

/// `slub_max_order`'s default: `PAGE_ALLOC_COSTLY_ORDER`.
pub const SLUB_MAX_ORDER: u8 = 3;

/// The largest order the page allocator gives (v6.6's inclusive `MAX_ORDER`).
const MAX_PAGE_ORDER: u32 = 10;

const PAGE_SIZE: u64 = 4096;

/// The fewest objects SLUB wants in a slab on a machine with `present_cpus` CPUs
/// (`slub_min_objects=` on the command line overrides it; Linux takes `nr_cpu_ids` when
/// only one CPU is present, which this takes as given).
pub fn min_objects(present_cpus: u32) -> u32 {
    let fls = u32::BITS - present_cpus.max(1).leading_zeros();
    4 * (fls + 1)
}

/// The order of the slabs of a cache of `size`-byte objects (`/proc/slabinfo`'s
/// `objsize`: the object with its alignment and metadata) when SLUB wants `min_objects`
/// in a slab, or `None` if one object does not fit a block of the largest order.
///
/// The search, as Linux's: the smallest order from the one that holds `min_objects`
/// objects up to [`SLUB_MAX_ORDER`] that wastes at most 1/16 of the slab, else 1/8, else
/// 1/4; failing all three, one object fewer, down to two; then any order that holds one
/// object, first up to [`SLUB_MAX_ORDER`], then beyond.
pub fn slab_order(size: u32, min_objects: u32) -> Option<u8> {
    if size == 0 {
        return Some(0);
    }
    let size = u64::from(size);
    let max_order = u32::from(SLUB_MAX_ORDER);
    let mut wanted = u64::from(min_objects).min(objects(max_order, size));
    while wanted > 1 {
        for fraction in [16, 8, 4] {
            let order = order_within(size, wanted, max_order, fraction);
            if order <= max_order {
                return Some(order as u8);
            }
        }
        wanted -= 1;
    }
    let order = order_within(size, 1, max_order, 1);
    if order <= max_order {
        return Some(order as u8);
    }
    let order = order_within(size, 1, MAX_PAGE_ORDER, 1);
    (order <= MAX_PAGE_ORDER).then_some(order as u8)
}

/// Objects of `size` bytes in a slab of `order`.
fn objects(order: u32, size: u64) -> u64 {
    (PAGE_SIZE << order) / size
}

/// The smallest order that holds `bytes` (Linux's `get_order`).
fn order_of(bytes: u64) -> u32 {
    let pages = bytes.div_ceil(PAGE_SIZE).max(1);
    pages.next_power_of_two().trailing_zeros()
}

/// Linux's `calc_slab_order`: the smallest order from the one that holds `wanted`
/// objects up to `max_order` whose leftover is at most 1/`fraction` of the slab;
/// `max_order + 1` if none is. (Linux first caps a slab at 32,767 objects, which only
/// a minimum order above SLUB's default 0 can reach: a page holds at most 4,096.)
fn order_within(size: u64, wanted: u64, max_order: u32, fraction: u64) -> u32 {
    let mut order = order_of(wanted * size);
    while order <= max_order {
        let slab = PAGE_SIZE << order;
        if slab % size <= slab / fraction {
            break;
        }
        order += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian 6.1's caches whose slab order moves with the CPU count, as QEMU guests'
    /// `/proc/slabinfo` showed them (`sh crates/trace/workloads/slab-orders-vm.sh
    /// /boot/vmlinuz-6.1.0-48-amd64 DIR 2 8 16 24 32 64`, and a 2-CPU guest booted with
    /// `slub_min_objects=36`, the 224-CPU machine's; docs/EXPERIMENTS.md, "What puts two
    /// high-order frees together" and "The published machine's slab orders").
    /// Object bytes, then the order at 2, 8, 16, 24, 32 and 64 CPUs and at 36 objects.
    const SLABINFO: [(&str, u32, [u8; 7]); 13] = [
        ("vm_area_struct", 152, [0, 0, 0, 0, 1, 1, 1]),
        ("maple_node", 256, [0, 1, 1, 1, 1, 1, 2]),
        ("anon_vma", 104, [0, 0, 0, 0, 0, 0, 0]),
        ("anon_vma_chain", 64, [0, 0, 0, 0, 0, 0, 0]),
        ("kmalloc-128", 128, [0, 0, 0, 0, 0, 0, 1]),
        ("kmalloc-192", 192, [0, 0, 1, 1, 1, 1, 1]),
        ("dentry", 192, [0, 0, 1, 1, 1, 1, 1]),
        ("filp", 256, [0, 1, 1, 1, 1, 1, 2]),
        ("mm_struct", 1152, [2, 3, 3, 3, 3, 3, 3]),
        ("files_cache", 704, [2, 2, 3, 3, 3, 3, 3]),
        ("signal_cache", 1152, [2, 3, 3, 3, 3, 3, 3]),
        ("sighand_cache", 2112, [3, 3, 3, 3, 3, 3, 3]),
        ("task_struct", 8448, [3, 3, 3, 3, 3, 3, 3]),
    ];

    #[test]
    fn orders_are_the_guests_slabinfo() {
        let wanted = [2, 8, 16, 24, 32, 64].map(min_objects);
        assert_eq!(wanted, [12, 20, 24, 24, 28, 32]);
        for (name, size, orders) in SLABINFO {
            for (i, &objects) in wanted.iter().chain(&[36]).enumerate() {
                assert_eq!(
                    slab_order(size, objects),
                    Some(orders[i]),
                    "{name} ({size} bytes) at {objects} objects"
                );
            }
        }
    }

    #[test]
    fn min_objects_steps_at_powers_of_two() {
        assert_eq!(min_objects(0), 8);
        assert_eq!(min_objects(1), 8);
        assert_eq!(min_objects(31), 24);
        assert_eq!(min_objects(32), 28);
        assert_eq!(min_objects(112), 32);
        assert_eq!(min_objects(128), 36);
        assert_eq!(min_objects(224), 36);
    }

    /// Every cache of two guests' `/proc/slabinfo` (Debian 6.1.0-48, 2 CPUs under
    /// QEMU, booted by virtme-ng as `slab-orders-vm.sh` boots them; the second with
    /// `slub_min_objects=36`, the 224-CPU machine's count): each cache's pages per slab
    /// is 2^(the order this gives for its `objsize`).
    #[test]
    fn every_cache_of_two_guests_slabinfo() {
        let guests = [
            (
                include_str!("testdata/slabinfo-6.1-2cpus.txt"),
                min_objects(2),
            ),
            (
                include_str!("testdata/slabinfo-6.1-2cpus-36objects.txt"),
                36,
            ),
        ];
        for (slabinfo, wanted) in guests {
            let mut caches = 0;
            for line in slabinfo
                .lines()
                .filter(|l| !l.starts_with("slabinfo") && !l.starts_with('#'))
            {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (name, size) = (fields[0], fields[3].parse::<u32>().unwrap());
                let pages: u32 = fields[5].parse().unwrap();
                assert_eq!(
                    slab_order(size, wanted).map(|o| 1u32 << o),
                    Some(pages),
                    "{name} ({size} bytes) at {wanted} objects"
                );
                caches += 1;
            }
            assert!(caches > 150, "{caches} caches read");
        }
        assert_eq!(slab_order(5 << 20, 36), None);
        assert_eq!(slab_order(8, 36), Some(0));
    }
}
