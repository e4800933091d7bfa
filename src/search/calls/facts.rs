//! What one file defines, calls and imports: the facts the call index keeps per file. A whole
//! tree's facts are cached, so they are compact: every string of a file is kept once and the
//! facts point into it; call snippets and signature lines are read from the file when a reply
//! shows them, not stored.

use std::collections::HashMap;

/// A file of the store, by number.
pub type FileId = u32;

/// A definition or call site: its file and its index in that file's list.
pub type At = (FileId, u32);

/// A definition's kind, as replies name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, bitcode::Encode, bitcode::Decode)]
pub enum DefKind {
    Function,
    Method,
    Class,
    Struct,
    Enum,
    Interface,
    Trait,
    Type,
    Constant,
    Module,
    Macro,
    /// A Rust `impl` block: named after its type, it holds that type's methods.
    Impl,
}

impl DefKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DefKind::Function => "function",
            DefKind::Method => "method",
            DefKind::Class => "class",
            DefKind::Struct => "struct",
            DefKind::Enum => "enum",
            DefKind::Interface => "interface",
            DefKind::Trait => "trait",
            DefKind::Type => "type",
            DefKind::Constant => "constant",
            DefKind::Module => "module",
            DefKind::Macro => "macro",
            DefKind::Impl => "impl",
        }
    }

    /// The kind a `@definition.<kind>` capture names; the shipped queries' other kinds
    /// (`field`, `implementation`...) are not definitions gm lists.
    pub fn from_capture(kind: &str) -> Option<Self> {
        Some(match kind {
            "function" => DefKind::Function,
            "method" | "constructor" => DefKind::Method,
            "class" => DefKind::Class,
            "struct" => DefKind::Struct,
            "enum" => DefKind::Enum,
            "interface" => DefKind::Interface,
            "trait" => DefKind::Trait,
            "type" => DefKind::Type,
            "constant" => DefKind::Constant,
            "module" => DefKind::Module,
            "macro" => DefKind::Macro,
            "impl" => DefKind::Impl,
            _ => return None,
        })
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::from_capture(name).filter(|k| k.as_str() == name)
    }

    /// A type whose methods can be called through a receiver.
    pub fn is_type(self) -> bool {
        matches!(
            self,
            DefKind::Class | DefKind::Struct | DefKind::Enum | DefKind::Interface | DefKind::Trait | DefKind::Impl
        )
    }

    pub fn is_callable(self) -> bool {
        matches!(self, DefKind::Function | DefKind::Method)
    }

    /// Code in it runs as part of it: a call there is that definition's call.
    pub fn encloses(self) -> bool {
        self.is_callable() || self.is_type()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
pub enum CallKind {
    /// `f(...)`, `Type::f(...)`, `ns::f(...)`.
    Call,
    /// `obj.f(...)`, `obj->f(...)`.
    Method,
    /// `new T(...)`, `T.new`.
    New,
    /// `name!(...)`, or a call of a C/C++ macro: counted, never resolved.
    Macro,
    /// Something that looks like a call inside a macro's arguments (`assert_eq!(f(x), y)`),
    /// which the grammar keeps as tokens: counted, never resolved.
    InMacro,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Call => "call",
            CallKind::Method => "method",
            CallKind::New => "new",
            CallKind::Macro => "macro",
            CallKind::InMacro => "call",
        }
    }
}

/// A piece of [`FileFacts::strings`]; empty (`len` 0) means none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    pub fn is_empty(self) -> bool {
        self.len == 0
    }
}

/// No definition (a call at the top level, a definition with no parent).
pub const NONE: u32 = u32::MAX;

/// A definition in one file. The file's path is left out (it is the cache's key).
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
pub struct Def {
    pub name: Span,
    pub kind: DefKind,
    /// First and last line (1-based).
    pub line: u32,
    pub end_line: u32,
    /// Where the line holding the name starts (a byte offset): the signature is read from there.
    pub sig_start: u32,
    /// The definition it is nested in (an index into [`FileFacts::definitions`]), or [`NONE`].
    pub parent: u32,
    /// The type a method belongs to (its class, `impl` type, Go receiver type); empty if none.
    pub owner: Span,
    /// A declaration without a body (a C prototype, a method declared in its class and defined
    /// outside it): resolution prefers the definition with the same name and owner.
    pub decl: bool,
    /// A method added to a function defined elsewhere, another module's (Julia's
    /// `Base.length(r::Repo)`): a call of the name may reach that function's own methods,
    /// which the workspace does not hold.
    pub extends: bool,
}

/// A call site in one file.
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
pub struct Call {
    pub line: u32,
    pub column: u32,
    /// Where the call starts (a byte offset): its snippet is read from there.
    pub start: u32,
    /// The called name as written (an alias when an import renamed it).
    pub callee: Span,
    pub kind: CallKind,
    /// The definition the call is in (the innermost function, method or type), or [`NONE`].
    pub enclosing: u32,
    /// The receiver or path the call goes through, as identifiers joined by `.` (`os.path`,
    /// `Type`, `self.repo`); empty when there is none or it is not a plain path (`f().g()`).
    pub qualifier: Span,
    /// The receiver's type when the file says it (`self` in a method, a typed variable); empty
    /// when it does not.
    pub recv_type: Span,
}

/// A name an import brings into a file.
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
pub struct Import {
    /// The name the file uses.
    pub local: Span,
    /// The name in the module it comes from; empty when the import names the module itself.
    pub name: Span,
    /// The module as written (`os.path`, `./db`, `crate::repo`, `example.com/m/util`).
    pub module: Span,
}

/// What one file defines and calls.
#[derive(Debug, Clone, Default, bitcode::Encode, bitcode::Decode)]
pub struct FileFacts {
    /// The language's name.
    pub lang: String,
    /// Every name of the file, each once, one after another: the facts point into it. A new gm
    /// reading the cache back then makes a few allocations per file instead of several per
    /// call site — those cost it most of its time, the kernel zeroing fresh pages.
    pub strings: String,
    /// The package or namespace the file declares (Go, Java, C#, PHP); empty if none.
    pub module: Span,
    /// In source order; a definition's parent comes before it.
    pub definitions: Vec<Def>,
    /// In source order.
    pub calls: Vec<Call>,
    pub imports: Vec<Import>,
    /// (type, base): a class's superclass or interface, a Rust trait a type implements.
    pub bases: Vec<(Span, Span)>,
    /// The tree had syntax errors: the facts are what parsed.
    pub partial: bool,
}

impl FileFacts {
    pub fn str(&self, span: Span) -> &str {
        let start = span.start as usize;
        self.strings.get(start..start + span.len as usize).unwrap_or("")
    }

    /// Whether `span` holds `s`; the lengths are compared first, which rules out most spans
    /// without touching the strings.
    pub fn is(&self, span: Span, s: &str) -> bool {
        span.len as usize == s.len() && self.str(span) == s
    }

    pub fn def(&self, index: u32) -> Option<&Def> {
        self.definitions.get(index as usize)
    }

    /// The names of a definition's parents, innermost first.
    pub fn parents(&self, index: u32) -> impl Iterator<Item = (u32, &Def)> {
        let mut next = self.def(index).map_or(NONE, |d| d.parent);
        std::iter::from_fn(move || {
            let i = next;
            let d = self.def(i)?;
            next = d.parent;
            Some((i, d))
        })
    }

    /// `Owner.name` for a method, else the name.
    pub fn qualified(&self, index: u32) -> String {
        let Some(d) = self.def(index) else { return "<top level>".into() };
        let name = self.str(d.name);
        match self.str(d.owner) {
            "" => name.to_owned(),
            owner => format!("{owner}.{name}"),
        }
    }
}

/// Builds one file's [`FileFacts`], storing each distinct string once.
#[derive(Default)]
pub struct Builder {
    pub facts: FileFacts,
    seen: HashMap<String, Span>,
}

impl Builder {
    /// `s`'s place in the strings; none past 4 GiB of them (the fact is then left out).
    pub fn intern(&mut self, s: &str) -> Option<Span> {
        if s.is_empty() {
            return Some(Span::default());
        }
        if let Some(span) = self.seen.get(s) {
            return Some(*span);
        }
        let span = Span { start: u32::try_from(self.facts.strings.len()).ok()?, len: u32::try_from(s.len()).ok()? };
        span.start.checked_add(span.len)?;
        self.facts.strings.push_str(s);
        self.seen.insert(s.to_owned(), span);
        Some(span)
    }
}

/// A line or column number as stored (1-based).
pub fn number(n: usize) -> u32 {
    u32::try_from(n + 1).unwrap_or(u32::MAX)
}

/// A byte offset as stored.
pub fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
