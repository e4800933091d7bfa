// The target triple this build is for: a release archive and the updater name builds by it.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=GM_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
