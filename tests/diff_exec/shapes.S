/* The assembly shapes of the differential execution test: what compilers
 * emit rarely or never, each `long a_NAME(long rdi, long rsi)` (h_NAME:
 * helpers, copied but not called directly). Functions are adjacent: a
 * copy that runs past its end would show. See diff_exec.cpp. */
        .intel_syntax noprefix
        .text

.macro FUNC name
        .globl \name
        .hidden \name
        .type \name, @function
        .p2align 4
\name:
.endm
.macro ENDF name
        .size \name, . - \name
.endm

/* Ends in a jcc: when rdi is even it falls into a_after_jcc. */
FUNC a_last_jcc
        lea rax, [rdi + 3]
        test dil, 1
        jne h_elsewhere
ENDF a_last_jcc
a_after_jcc:                       /* no padding: right after a_last_jcc */
        .globl a_after_jcc
        .hidden a_after_jcc
        .type a_after_jcc, @function
        lea rax, [rdi + 100]
        ret
        .size a_after_jcc, . - a_after_jcc
FUNC h_elsewhere
        lea rax, [rdi + rdi + 1]
        ret
ENDF h_elsewhere

/* Ends in a call: when h_triple returns it goes on into h_after_call. */
FUNC a_last_call
        lea rax, [rdi + 1]
        call h_triple
ENDF a_last_call
h_after_call:
        .globl h_after_call
        .hidden h_after_call
        .type h_after_call, @function
        add rax, 7
        ret
        .size h_after_call, . - h_after_call
FUNC h_triple
        lea rax, [rax + rax * 2]
        ret
ENDF h_triple

/* The loop head lies under the entry patch, right after endbr64. */
FUNC a_endbr_loop
        endbr64
1:      shr rdi
        jne 1b
        lea rax, [rdi + rsi + 7]
        ret
ENDF a_endbr_loop

/* Every rel8 jcc, each adding its bit when not taken. */
FUNC a_rel8_all
        xor eax, eax
        cmp rdi, rsi
        jo 1f
        lea rax, [rax + 1]
1:      jno 1f
        lea rax, [rax + 2]
1:      jb 1f
        lea rax, [rax + 4]
1:      jae 1f
        lea rax, [rax + 8]
1:      je 1f
        lea rax, [rax + 16]
1:      jne 1f
        lea rax, [rax + 32]
1:      jbe 1f
        lea rax, [rax + 64]
1:      ja 1f
        lea rax, [rax + 128]
1:      js 1f
        lea rax, [rax + 256]
1:      jns 1f
        lea rax, [rax + 512]
1:      jp 1f
        lea rax, [rax + 1024]
1:      jnp 1f
        lea rax, [rax + 2048]
1:      jl 1f
        lea rax, [rax + 4096]
1:      jge 1f
        lea rax, [rax + 8192]
1:      jle 1f
        lea rax, [rax + 16384]
1:      jg 1f
        lea rax, [rax + 32768]
1:      ret
ENDF a_rel8_all

/* loop, with jrcxz guarding a zero count. */
FUNC a_loop
        mov rcx, rdi
        and rcx, 63
        xor eax, eax
        jrcxz 2f
1:      add rax, rsi
        loop 1b
2:      ret
ENDF a_loop

/* loope: counts while the low bit of the running sum stays clear. */
FUNC a_loope
        mov rcx, rdi
        and rcx, 31
        inc rcx
        mov rax, rsi
1:      add rax, 2
        test al, 1
        loope 1b
        lea rax, [rax + rcx * 8]
        ret
ENDF a_loope

/* loopne: counts until rax reaches rsi's low bits. */
FUNC a_loopne
        mov rcx, rdi
        and rcx, 63
        inc rcx
        mov rdx, rsi
        and rdx, 15
        xor eax, eax
1:      inc rax
        cmp rax, rdx
        loopne 1b
        lea rax, [rax + rcx * 4]
        ret
ENDF a_loopne

FUNC a_jecxz
        mov ecx, edi
        and ecx, 3
        xor eax, eax
        jecxz 1f
        mov eax, 5
1:      add rax, rsi
        ret
ENDF a_jecxz

/* rep stosq, rep movsb, repne scasb on a stack buffer. */
FUNC a_rep_strings
        sub rsp, 136
        mov rdx, rdi
        mov rax, rsi
        lea rdi, [rsp]
        mov ecx, 16
        rep stosq
        lea rsi, [rsp]
        lea rdi, [rsp + 64]
        mov rcx, rdx
        and rcx, 63
        mov byte ptr [rsp + 5], dl
        rep movsb
        lea rdi, [rsp]
        mov ecx, 128
        mov al, dl
        repne scasb
        mov rax, rcx
        add rax, qword ptr [rsp + 64]
        add rsp, 136
        ret
ENDF a_rep_strings

/* A transaction whose abort path computes the same: runs only with RTM. */
FUNC a_tsx
        xbegin 1f
        lea rax, [rdi + 1]
        xend
        ret
1:      lea rax, [rdi + 1]
        ret
ENDF a_tsx

/* h_get_pc reads its return address; a_uses_pc compares it with itself. */
FUNC h_get_pc
        mov rax, qword ptr [rsp]
        ret
ENDF h_get_pc
FUNC a_uses_pc
        call h_get_pc
        lea rcx, [rip + a_uses_pc]
        sub rax, rcx
        add rax, rdi
        ret
ENDF a_uses_pc

/* h_is_my_caller compares its return address with a label in its caller. */
FUNC h_is_my_caller
        mov rax, qword ptr [rsp]
        lea rcx, [rip + .Lcaller_returns_here]
        cmp rax, rcx
        sete al
        movzx eax, al
        ret
ENDF h_is_my_caller
FUNC a_checks_caller
        push rbx
        mov rbx, rdi
        call h_is_my_caller
.Lcaller_returns_here:
        add rax, rbx
        pop rbx
        ret
ENDF a_checks_caller

/* a_mempcpy_like jumps 3 bytes into a_memcpy_like, as mempcpy into memcpy. */
FUNC a_mempcpy_like
        lea rdi, [rdi + rsi]
        jmp .Lmemcpy_inner
ENDF a_mempcpy_like
FUNC a_memcpy_like
        mov rax, rdi
.Lmemcpy_inner:
        lea rax, [rdi + 5]
        ret
ENDF a_memcpy_like

        .section .note.GNU-stack, "", @progbits
