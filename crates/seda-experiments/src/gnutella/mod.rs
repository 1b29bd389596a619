//! The Gnutella router's experiments (`seda experiment gnutella` and
//! `gnutella-throughput`): [`fig14`] reruns SEDA Fig. 14 (a 20 ms query cost, one
//! router thread vs the thread-pool controller); [`throughput`] races the staged
//! router against [`plain`], the same routing work in one epoll loop without stages.
//! The traffic is the simulated peers of `seda load gnutella`.

pub mod fig14;
pub mod plain;
pub mod throughput;
