//! The floor under run_shell's overhead: what spawning `bash -c true` costs a program that does
//! nothing else, waited three ways — `std::process::Command::status` (blocking), the same with
//! piped output read to the end (`output`), and `tokio::process` with piped output awaited on a
//! current-thread runtime, as gm's worker does. Prints p50 and the program's own CPU per spawn.
//!
//!   taskset -c 0 ./target/release/spawn-floor [N]

use std::process::{Command, Stdio};
use std::time::Instant;

use tokio::io::AsyncReadExt;

fn cpu_us() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by the kernel.
    let u = unsafe { u.assume_init() };
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1e6 + tv.tv_usec as f64;
    t(u.ru_utime) + t(u.ru_stime)
}

fn bash() -> String {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("bash")).find(|p| p.is_file()))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bash".into())
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let bash = bash();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let ways = ["status", "output", "tokio"];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    let mut cpu = vec![0.0; ways.len()];
    // In turns, so that the VM's drift touches every way alike.
    for _ in 0..n {
        for (i, way) in ways.iter().enumerate() {
            let (c, t) = (cpu_us(), Instant::now());
            match *way {
                "status" => {
                    Command::new(&bash).args(["-c", "true"]).stdout(Stdio::null()).status().expect("bash");
                }
                "output" => {
                    let mut cmd = Command::new(&bash);
                    cmd.args(["-c", "true"]).stdin(Stdio::null());
                    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
                    cmd.output().expect("bash");
                }
                _ => rt.block_on(async {
                    let mut cmd = tokio::process::Command::new(&bash);
                    cmd.args(["-c", "true"])
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .process_group(0);
                    let mut child = cmd.spawn().expect("bash");
                    let (mut out, mut err) = (child.stdout.take().expect("out"), child.stderr.take().expect("err"));
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    let (r1, r2, status) = tokio::join!(out.read_to_end(&mut a), err.read_to_end(&mut b), child.wait());
                    r1.and(r2).and(status).expect("bash");
                }),
            }
            times[i].push(t.elapsed().as_secs_f64() * 1e6);
            cpu[i] += cpu_us() - c;
        }
    }
    println!("| way ({n} each, in turns) | p50 (µs) | this program's CPU per spawn (µs) |\n|---|---|---|");
    for (i, way) in ways.iter().enumerate() {
        let t = &mut times[i];
        t.sort_by(|a, b| a.total_cmp(b));
        println!("| {way} | {:.0} | {:.0} |", t[t.len() / 2], cpu[i] / n as f64);
    }
}
