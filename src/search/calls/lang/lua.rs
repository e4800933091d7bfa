//! Lua: functions, `function T:m()` and `function T.f()` (functions of the table `T`),
//! `self`, `local m = require("a.b")` and `m.f()`, and a variable typed by the constructor
//! convention `local r = Repo.new()`. A capitalized table (`local Repo = {}`) is taken as a
//! class, which is how Lua code written with metatables names its classes; a function bound to
//! a variable (`local inner = function() end`) is a function of that name.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&LUA];

pub static LUA: Lang = Lang {
    name: "lua",
    extensions: &["lua"],
    interpreters: &["lua", "luajit"],
    grammar: || tree_sitter_lua::LANGUAGE.into(),
    // gm's query covers the shipped one's definitions and calls, with the owners it lacks.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["self"],
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(variable_declaration (assignment_statement (variable_list . name: (identifier) @name .) (expression_list . value: (table_constructor) .)) (#match? @name "^[A-Z]")) @definition.class
(function_declaration name: (identifier) @name) @definition.function
(function_declaration name: (method_index_expression table: (identifier) @owner method: (identifier) @name)) @definition.method
(function_declaration name: (dot_index_expression table: (identifier) @owner field: (identifier) @name)) @definition.method
(variable_declaration (assignment_statement (variable_list . name: (identifier) @name .) (expression_list . value: (function_definition) .))) @definition.function
(assignment_statement (variable_list . name: (identifier) @name .) (expression_list . value: (function_definition) .)) @definition.function

(function_call name: (identifier) @name) @reference.call
(function_call name: (method_index_expression table: (_) @receiver method: (identifier) @name)) @reference.call
(function_call name: (dot_index_expression table: (_) @receiver field: (identifier) @name)) @reference.call

(variable_declaration (assignment_statement (variable_list . name: (identifier) @import.alias .) (expression_list . value: (function_call name: (identifier) @require arguments: (arguments . (string content: (string_content) @import.module) .)))) (#eq? @require "require")) @import

(variable_declaration (assignment_statement (variable_list . name: (identifier) @bind.name .) (expression_list . value: (function_call name: (dot_index_expression table: (identifier) @bind.type field: (identifier) @new)))) (#eq? @new "new") (#match? @bind.type "^[A-Z]"))
"#;
