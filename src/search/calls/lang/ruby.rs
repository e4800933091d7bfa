//! Ruby: classes and modules, `self`, bare calls of the class's own methods, `@ivar = X.new`
//! typing instance variables. A bare identifier with no arguments (`flush`) may be a call or a
//! local variable; telling them apart needs the locals analysis gm does not run, so such calls
//! are not counted (the shipped query's pattern for them is disabled).

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&RUBY];

pub static RUBY: Lang = Lang {
    name: "ruby",
    extensions: &["rb", "rake", "gemspec"],
    interpreters: &["ruby", "jruby"],
    grammar: || tree_sitter_ruby::LANGUAGE.into(),
    tags: &[tree_sitter_ruby::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["self"],
        implicit_self: true,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(program (method name: (_) @name) @definition.function)
(class name: [(constant) @name (scope_resolution name: (_) @name)] superclass: (superclass [(constant) @base (scope_resolution name: (_) @base)])?) @definition.class
(module name: [(constant) @name (scope_resolution name: (_) @name)]) @definition.module
(method name: (_) @name) @definition.method
(singleton_method name: (_) @name) @definition.method
(assignment left: (constant) @name) @definition.constant

(call receiver: [(constant) @name (scope_resolution name: (constant) @name)] method: (identifier) @new (#eq? @new "new")) @reference.new
(call !receiver method: (identifier) @name) @reference.call
(call receiver: (_) @receiver method: (identifier) @name) @reference.call

(assignment left: (identifier) @bind.name right: (call receiver: [(constant) @bind.type (scope_resolution name: (constant) @bind.type)] method: (identifier) @new (#eq? @new "new")))
(assignment left: (instance_variable) @bind.field right: (call receiver: [(constant) @bind.type (scope_resolution name: (constant) @bind.type)] method: (identifier) @new (#eq? @new "new")))
"#;
